"""dragon-nccl-dist's tests: the ``gpu`` marker (tests that need a CUDA
device also skip, saying so, where there is none)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skips with the reason "
                            "elsewhere)")
