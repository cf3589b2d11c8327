// gcp-pubsub-idempotency: exactly-once processing for at-least-once message consumers.
//
// The umbrella header of the core. Backends have their own headers, included on their own
// so a program links only the drivers it uses.
#pragma once

#include "idempotency/backend.h"
#include "idempotency/clock.h"
#include "idempotency/codec.h"
#include "idempotency/done_cache.h"
#include "idempotency/errors.h"
#include "idempotency/forwarding_backend.h"
#include "idempotency/guard.h"
#include "idempotency/key.h"
#include "idempotency/log.h"
#include "idempotency/memory_lock.h"
#include "idempotency/once.h"
#include "idempotency/reclaimer.h"
#include "idempotency/record.h"
