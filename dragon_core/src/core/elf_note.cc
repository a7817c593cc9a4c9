#include "elf_note.h"

#include <elf.h>

#include <cstring>
#include <fstream>
#include <vector>

#include "dragon/plugin.h"

namespace dragon {
namespace {

// Notes are small; a note area larger than this is not one we wrote.
constexpr uint64_t kMaxNoteArea = uint64_t{1} << 20;
constexpr char kOwner[] = DG_ABI_NOTE_OWNER;  // with its NUL: namesz 7

class File {
 public:
  explicit File(const std::string& path) : in_(path, std::ios::binary) {
    if (!in_) return;
    in_.seekg(0, std::ios::end);
    std::streamoff end = in_.tellg();
    size_ = end > 0 ? static_cast<uint64_t>(end) : 0;
  }
  // Reads [off, off + n) or fails; never reads past the end.
  bool Read(uint64_t off, void* dst, uint64_t n) {
    if (!in_ || off > size_ || n > size_ - off) return false;
    in_.clear();
    in_.seekg(static_cast<std::streamoff>(off));
    in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
    return static_cast<uint64_t>(in_.gcount()) == n;
  }

 private:
  std::ifstream in_;
  uint64_t size_ = 0;
};

uint64_t Pad(uint64_t n, uint64_t align) { return (n + align - 1) / align * align; }

// Looks for our note among the notes stored at [off, off + size).
bool ScanNotes(File& f, uint64_t off, uint64_t size, uint64_t align, AbiNote* out) {
  if (size < 12 || size > kMaxNoteArea) return false;
  align = align == 8 ? 8 : 4;  // gABI: 4; .note.gnu.property uses 8
  std::vector<unsigned char> buf(size);
  if (!f.Read(off, buf.data(), size)) return false;
  for (uint64_t pos = 0; pos + 12 <= size;) {
    uint32_t head[3];  // namesz, descsz, type
    std::memcpy(head, buf.data() + pos, sizeof(head));
    uint64_t name_at = pos + 12;
    uint64_t desc_at = name_at + Pad(head[0], align);
    uint64_t next = desc_at + Pad(head[1], align);
    if (next > size || next <= pos) return false;
    if (head[0] == sizeof(kOwner) && head[2] == DG_ABI_NOTE_TYPE && head[1] >= 12 &&
        std::memcmp(buf.data() + name_at, kOwner, sizeof(kOwner)) == 0) {
      uint32_t desc[3];
      std::memcpy(desc, buf.data() + desc_at, sizeof(desc));
      out->found = true;
      out->abi_major = desc[0];
      out->abi_minor = desc[1];
      out->min_host_minor = desc[2];
      return true;
    }
    pos = next;
  }
  return false;
}

template <typename Ehdr, typename Shdr, typename Phdr>
AbiNote Scan(File& f) {
  AbiNote note;
  Ehdr eh;
  if (!f.Read(0, &eh, sizeof(eh))) return note;
  if (eh.e_shoff != 0 && eh.e_shentsize == sizeof(Shdr)) {
    for (uint64_t i = 0; i < eh.e_shnum; ++i) {
      Shdr sh;
      if (!f.Read(eh.e_shoff + i * sizeof(Shdr), &sh, sizeof(sh))) break;
      if (sh.sh_type == SHT_NOTE &&
          ScanNotes(f, sh.sh_offset, sh.sh_size, sh.sh_addralign, &note))
        return note;
    }
  }
  if (eh.e_phoff != 0 && eh.e_phentsize == sizeof(Phdr)) {
    for (uint64_t i = 0; i < eh.e_phnum; ++i) {
      Phdr ph;
      if (!f.Read(eh.e_phoff + i * sizeof(Phdr), &ph, sizeof(ph))) break;
      if (ph.p_type == PT_NOTE && ScanNotes(f, ph.p_offset, ph.p_filesz, ph.p_align, &note))
        return note;
    }
  }
  return note;
}

bool HostIsLittleEndian() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

}  // namespace

AbiNote ReadAbiNote(const std::string& path) {
  File f(path);
  unsigned char ident[EI_NIDENT];
  if (!f.Read(0, ident, sizeof(ident)) || std::memcmp(ident, ELFMAG, SELFMAG) != 0)
    return {};
  // A file of another byte order cannot be loaded here anyway: dlopen says why.
  if (ident[EI_DATA] != (HostIsLittleEndian() ? ELFDATA2LSB : ELFDATA2MSB)) return {};
  if (ident[EI_CLASS] == ELFCLASS64) return Scan<Elf64_Ehdr, Elf64_Shdr, Elf64_Phdr>(f);
  if (ident[EI_CLASS] == ELFCLASS32) return Scan<Elf32_Ehdr, Elf32_Shdr, Elf32_Phdr>(f);
  return {};
}

}  // namespace dragon
