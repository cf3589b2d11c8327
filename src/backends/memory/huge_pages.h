// Memory for the memory backend's big, randomly read structures, on transparent huge pages.
//
// A store of millions of records is read at random: on 4 KiB pages nearly every lookup would
// also miss the TLB and walk the page tables, and every first touch of a page is a fault (about
// 10 µs each on the VMs we measured, more than the claim itself). A 2 MiB page costs one fault.
#pragma once

#include <cstddef>

namespace idempotency::detail {

/// Bytes in a huge page; map_huge() sizes are multiples of it.
inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

/// Whether map_huge() asks for huge pages: kSmall for memory that may stay mostly untouched
/// (a 2 MiB page is resident in full from its first touch).
enum class Pages { kHuge, kSmall };

/// map_huge() returns `bytes` (a multiple of kHugePageBytes) of zeroed memory aligned to
/// kHugePageBytes, advised for huge pages or against them (a hint: without THP it is 4 KiB
/// pages). Throws `std::bad_alloc` when the system has no room.
[[nodiscard]] void* map_huge(std::size_t bytes, Pages pages = Pages::kHuge);

/// unmap_huge() returns memory from map_huge(`bytes`) to the system.
void unmap_huge(void* memory, std::size_t bytes) noexcept;

}  // namespace idempotency::detail
