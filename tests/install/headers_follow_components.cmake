# cmake -P script: configures the project with only the core built (no optional backend or
# component) and checks that its install rules ship the core's headers and no header of a
# component that was not built. Only configures: the install rules are what is checked.
include(${CMAKE_CURRENT_LIST_DIR}/run_checked.cmake)
file(REMOVE_RECURSE ${SCRATCH})
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${SCRATCH} -G ${GENERATOR} -Wno-dev
    -DIDEMPOTENCY_SQLITE=OFF -DIDEMPOTENCY_REDIS=OFF -DIDEMPOTENCY_POSTGRES=OFF
    -DIDEMPOTENCY_DATASTORE=OFF -DIDEMPOTENCY_PUBSUB=OFF -DIDEMPOTENCY_OIDC=OFF
    -DIDEMPOTENCY_HTTP=OFF -DIDEMPOTENCY_TESTS=OFF -DIDEMPOTENCY_EXAMPLES=OFF)
file(GLOB_RECURSE rule_files ${SCRATCH}/cmake_install.cmake)
set(rules "")
foreach(f IN LISTS rule_files)
  file(READ ${f} text)
  string(APPEND rules "${text}")
endforeach()
foreach(header backend.h memory_lock.h backend_url.h backend_registry.h open_backend.h)
  if(NOT rules MATCHES "include/idempotency/${header}")
    message(FATAL_ERROR "a core-only install lacks idempotency/${header}")
  endif()
endforeach()
foreach(header sqlite_lock.h redis_lock.h postgres_lock.h datastore_lock.h google_auth.h
               http.h oidc.h pubsub/idempotent.h)
  if(rules MATCHES "include/idempotency/${header}")
    message(FATAL_ERROR "a core-only install ships idempotency/${header} of a component not built")
  endif()
endforeach()
file(REMOVE_RECURSE ${SCRATCH})
message(STATUS "a core-only install ships the core's headers and no other component's")
