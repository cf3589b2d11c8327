// An outside program using the installed package: one lock on SQLite, then its duplicate.
#include <idempotency/idempotency.h>
#include <idempotency/sqlite_lock.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  idempotency::SqliteLock backend(argv[1]);
  int runs = 0;
  {
    auto held = idempotency::lock("consumer:1", backend);
    ++runs;
  }
  try {
    auto again = idempotency::lock("consumer:1", backend);
    ++runs;
  } catch (const idempotency::Duplicate&) {
  }
  std::printf("runs=%d\n", runs);
  return runs == 1 ? 0 : 1;
}
