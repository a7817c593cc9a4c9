// Reads a plugin's ABI note (DG_ABI_NOTE, section .note.dragon.abi) from
// its file without loading it, so the loader can refuse a plugin before any
// of its code (static constructors included) runs.
#ifndef DRAGON_CORE_ELF_NOTE_H_
#define DRAGON_CORE_ELF_NOTE_H_

#include <cstdint>
#include <string>

namespace dragon {

struct AbiNote {
  bool found = false;  // false: no note, or not an ELF file of this host
  uint32_t abi_major = 0;
  uint32_t abi_minor = 0;
  uint32_t min_host_minor = 0;
};

// Plain file reads with every offset and size checked against the file:
// a truncated or hostile file gives `found == false`, never a crash. Looks
// in the SHT_NOTE sections, then (for a library stripped of its section
// headers) in the PT_NOTE segments.
AbiNote ReadAbiNote(const std::string& path);

}  // namespace dragon

#endif  // DRAGON_CORE_ELF_NOTE_H_
