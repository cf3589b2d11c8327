#include "huge_pages.h"

#include <sys/mman.h>

#include <cstdint>
#include <new>

namespace idempotency::detail {

void* map_huge(std::size_t bytes, Pages pages) {
  // mmap aligns to 4 KiB only: map a huge page more than asked and unmap the ends around the
  // first 2 MiB boundary.
  const std::size_t padded = bytes + kHugePageBytes;
  void* raw = ::mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  char* const start = static_cast<char*>(raw);
  const std::size_t misalignment = reinterpret_cast<std::uintptr_t>(start) % kHugePageBytes;
  const std::size_t head = misalignment == 0 ? 0 : kHugePageBytes - misalignment;
  if (head != 0) (void)::munmap(start, head);
  char* const memory = start + head;
  if (const std::size_t tail = padded - head - bytes; tail != 0) {
    (void)::munmap(memory + bytes, tail);
  }
  // Said either way: where THP is `always`, an aligned 2 MiB mapping gets a huge page unasked.
  (void)::madvise(memory, bytes, pages == Pages::kHuge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  return memory;
}

void unmap_huge(void* memory, std::size_t bytes) noexcept { (void)::munmap(memory, bytes); }

}  // namespace idempotency::detail
