// Statement parameters and results in libpq's binary format, decoded strictly: a result of
// any shape but the expected one is a StoreError, never a guessed outcome.
#include <libpq-fe.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "idempotency/errors.h"
#include "postgres_internal.h"

namespace idempotency::postgres_detail {
namespace {

void put_be64(std::int64_t v, std::array<char, 8>& out) {
  auto u = static_cast<std::uint64_t>(v);
  for (int i = 7; i >= 0; --i) {
    out[static_cast<std::size_t>(i)] = static_cast<char>(u & 0xffU);
    u >>= 8;
  }
}

}  // namespace

void Params::bytes(std::string_view b) { add(b.data() == nullptr ? "" : b.data(), b.size()); }

void Params::bytes(const std::optional<std::string>& b) {
  if (b) {
    bytes(std::string_view(*b));
  } else {
    add(nullptr, 0);  // SQL NULL
  }
}

void Params::int8(std::int64_t v) {
  put_be64(v, ints_.at(int_count_));
  add(ints_.at(int_count_++).data(), 8);
}

void Params::int8(std::optional<std::int64_t> v) {
  if (v) {
    int8(*v);
  } else {
    add(nullptr, 0);  // SQL NULL
  }
}

void Params::clock() {
  clock_at_ = count_;
  clock_slot_ = int_count_++;
  (void)ints_.at(clock_slot_);  // the bound int8() checks
  add(nullptr, 0);
}

void Params::set_clock(std::optional<std::int64_t> now) {
  if (clock_at_ == kMax) return;
  if (now) {
    put_be64(*now, ints_.at(clock_slot_));
    values_.at(clock_at_) = ints_.at(clock_slot_).data();
    lengths_.at(clock_at_) = 8;
  } else {
    values_.at(clock_at_) = nullptr;  // SQL NULL
    lengths_.at(clock_at_) = 0;
  }
}

void Params::add(const char* p, std::size_t n) {
  values_.at(count_) = p;
  lengths_.at(count_) = static_cast<int>(n);
  formats_.at(count_) = 1;
  ++count_;
}

[[noreturn]] void bad_shape(const char* op, const std::string& what) {
  throw StoreError(std::string("postgres: ") + op + " got a reply of an unexpected shape (" + what +
                   ")");
}

void expect_shape(const PGresult* r, const char* op, int rows_min, int rows_max,
                  std::initializer_list<Oid> types) {
  const int rows = PQntuples(r);
  if (rows < rows_min || rows > rows_max) {
    bad_shape(op, std::to_string(rows) + " rows");
  }
  if (PQnfields(r) != static_cast<int>(types.size())) {
    bad_shape(op, std::to_string(PQnfields(r)) + " columns");
  }
  int i = 0;
  for (Oid t : types) {
    if (PQftype(r, i) != t || PQfformat(r, i) != 1) {
      bad_shape(op,
                "column " + std::to_string(i) + " has type oid " + std::to_string(PQftype(r, i)));
    }
    ++i;
  }
}

std::int64_t get_int(const PGresult* r, int row, int col, const char* op) {
  if (PQgetisnull(r, row, col) != 0) bad_shape(op, "null integer");
  const int len = PQgetlength(r, row, col);
  if (len != 2 && len != 8) bad_shape(op, "integer of " + std::to_string(len) + " bytes");
  const auto* p = reinterpret_cast<const unsigned char*>(PQgetvalue(r, row, col));
  std::uint64_t u = 0;
  for (int i = 0; i < len; ++i) u = (u << 8) | p[i];
  if (len == 2) return static_cast<std::int16_t>(static_cast<std::uint16_t>(u));
  return static_cast<std::int64_t>(u);
}

bool get_bool(const PGresult* r, int row, int col, const char* op) {
  if (PQgetisnull(r, row, col) != 0 || PQgetlength(r, row, col) != 1) {
    bad_shape(op, "bad boolean");
  }
  return *PQgetvalue(r, row, col) != 0;
}

std::optional<std::string> get_bytes(const PGresult* r, int row, int col) {
  if (PQgetisnull(r, row, col) != 0) return std::nullopt;
  return std::string(PQgetvalue(r, row, col), static_cast<std::size_t>(PQgetlength(r, row, col)));
}

RecordState get_state(const PGresult* r, int row, int col, const char* op) {
  const auto v = get_int(r, row, col, op);
  if (v == 1) return RecordState::kClaimed;
  if (v == 2) return RecordState::kDone;
  bad_shape(op, "state " + std::to_string(v));
}

}  // namespace idempotency::postgres_detail
