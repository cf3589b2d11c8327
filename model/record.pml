/* The idempotency record protocol of src/core/transition.cc, for spin (docs/MODEL.md).
 *
 * One key. Each store call is one atomic step that applies transition() to the record, as a
 * backend does inside its transaction (or Redis inside its Lua script). Time is a small
 * integer clock that a ticker advances nondeterministically, so any worker may stall at any
 * point for any number of ticks (a zombie) and resume. Workers claim (re-sending the same
 * claim token after a lost reply), may renew (extend), run the work (an effect sent to a
 * fenced sink), then complete or release; any of them may crash at any point, and each is
 * killed by its platform LIFE ticks after its delivery began (invariant 2 of the seed:
 * lease + ttl outlives every holder).
 *
 * Variants (-D...):   REDIS     the Lua script's load(): a record at or past expires_at is
 *                               absent, so a claim restarts the fence at 1
 *                     NO_PURGE  no reaper (by default a reaper may delete any record past
 *                               expires_at at any moment: purge_expired, Redis, the sweep)
 * Mutants that must fail: MUTANT_NO_FENCE_CHECK, MUTANT_EARLY_RECLAIM,
 *                         MUTANT_TTL_FROM_CLAIM, MUTANT_HOLDER_OUTLIVES_RECORD
 * Witnesses that must fail too (the scenario is in the search): COVER_RESTART, COVER_ZOMBIE
 */

#ifndef N
#define N 2               /* workers: 3 takes minutes and gigabytes */
#endif
#define LEASE 1
#define TTL 3
#ifdef MUTANT_HOLDER_OUTLIVES_RECORD
#define LIFE (LEASE + TTL + 1)  /* breaks invariant 2: a holder outlives its record */
#else
#define LIFE (LEASE + TTL - 1)  /* invariant 2: lease + ttl > a holder's lifetime */
#endif
#ifndef MAXT
#define MAXT 5            /* the clock stops here */
#endif

#define CLAIMED 1
#define DONE 2

#define WON 1
#define ALREADY_DONE 2
#define HELD 3
#define OK 4
#define REFUSED 5

byte now;

/* The record: r_exists == 0 is "no record". r_epoch is a ghost: the claim (or release) that
 * wrote the fence, numbered by g_epoch, which unlike the fence never restarts. */
bool r_exists;
byte r_state, r_fence, r_lease, r_exp, r_token, r_epoch;

/* Ghosts for the properties. */
byte g_epoch;            /* claims written + releases accepted */
bool w_holds[N];         /* the store granted worker i a claim it has not completed/released */
byte w_lease[N];         /* ... whose lease runs until w_lease[i] */
byte g_done_until;       /* the key is DONE within its ttl while now < g_done_until */
byte sink_max;           /* the highest fence the sink has accepted an effect from */

#define live(i) (w_holds[i] && now < w_lease[i])
#if N == 2
#define TWO_LIVE (live(0) && live(1))
#else
#define TWO_LIVE ((live(0) && live(1)) || (live(0) && live(2)) || (live(1) && live(2)))
#endif

inline drop_record() {
  r_exists = 0; r_state = 0; r_fence = 0; r_lease = 0; r_exp = 0; r_token = 0; r_epoch = 0
}

/* Redis's load(): a record at or past expires_at is absent, reaped or not. */
inline load() {
#ifdef REDIS
  if
  :: r_exists && now >= r_exp -> drop_record()
  :: else -> skip
  fi
#endif
  skip
}

/* fresh(fence) in apply_claim: a new CLAIMED record for this caller. */
inline write_claim(id, tok, f, ans, fence, epoch) {
#ifdef COVER_RESTART
  assert(f != 1 || g_epoch == 0);  /* witness: a fence restarts at 1 after a record went */
#endif
  g_epoch++;
  r_exists = 1; r_state = CLAIMED; r_fence = f; r_lease = now + LEASE;
  r_exp = now + LEASE + TTL; r_token = tok; r_epoch = g_epoch;
  assert(now >= g_done_until);     /* (c) nobody wins a key DONE within its ttl */
  w_holds[id] = 1; w_lease[id] = r_lease;
  ans = WON; fence = r_fence; epoch = r_epoch
}

/* apply_claim */
inline claim(id, tok, ans, fence, epoch) {
  load();
  if
  :: !r_exists -> write_claim(id, tok, 1, ans, fence, epoch)
  :: r_exists && r_state == CLAIMED && r_token == tok && now < r_lease && now < r_exp ->
     /* re-affirm: a retried claim finds its own live claim; nothing written */
     ans = WON; fence = r_fence; epoch = r_epoch
  :: else ->
     if
     :: now >= r_exp -> write_claim(id, tok, r_fence + 1, ans, fence, epoch)
     :: else ->
        if
        :: r_state == DONE -> ans = ALREADY_DONE
#ifdef MUTANT_EARLY_RECLAIM
        :: else -> write_claim(id, tok, r_fence + 1, ans, fence, epoch)  /* no lease check */
#else
        :: r_state == CLAIMED && now < r_lease -> ans = HELD
        :: else -> write_claim(id, tok, r_fence + 1, ans, fence, epoch)  /* reclaim */
#endif
        fi
     fi
  fi
}

/* apply_complete: no lease guard, an exact fence match. */
inline complete(id, fence, epoch, ans) {
  load();
#ifdef COVER_ZOMBIE
  assert(!(r_exists && now < r_exp && r_fence != fence));  /* witness: a stale complete */
#endif
#ifdef MUTANT_NO_FENCE_CHECK
  if
  :: !r_exists || now >= r_exp -> ans = REFUSED
#else
  if
  :: !r_exists || now >= r_exp || r_fence != fence -> ans = REFUSED
#endif
  :: else ->
     assert(epoch == r_epoch);      /* (b) only the current claim completes */
     if
     :: r_state == DONE -> ans = OK  /* a retried complete: idempotent */
     :: else ->
        r_state = DONE;
#ifdef MUTANT_TTL_FROM_CLAIM
        skip;                        /* keeps the claim's expires_at */
#else
        r_exp = now + TTL;
#endif
        g_done_until = now + TTL;    /* the ghost: the ttl runs from success */
        w_holds[id] = 0;
        ans = OK
     fi
  fi
}

/* apply_release: expire the lease in place, advance the fence, clear the token. */
inline release(id, fence, epoch, ans) {
  load();
  if
  :: !r_exists || now >= r_exp || r_fence != fence || r_state == DONE -> ans = REFUSED
  :: else ->
     assert(epoch == r_epoch);      /* (b) only the current claim releases */
     r_lease = now; r_fence++; r_token = 0;
     if
     :: r_exp < now + TTL -> r_exp = now + TTL
     :: else -> skip
     fi;
     g_epoch++; r_epoch = g_epoch;  /* the released claim is dead */
     w_holds[id] = 0;
     ans = OK
  fi
}

/* apply_extend: fence and token must match; the sole holder even past its lease. */
inline extend(id, tok, fence, epoch, ans) {
  load();
  if
  :: !r_exists || now >= r_exp || r_fence != fence || r_state != CLAIMED || r_token != tok ->
     ans = REFUSED
  :: else ->
     assert(epoch == r_epoch);
     r_lease = now + LEASE;
     if
     :: r_exp < now + LEASE + TTL -> r_exp = now + LEASE + TTL
     :: else -> skip
     fi;
     w_lease[id] = r_lease;
     ans = OK
  fi
}

/* The work's side effect, at a sink that refuses a fence below the highest it has seen. */
inline effect(fence) {
  if
  :: fence >= sink_max ->
     assert(now >= g_done_until);   /* (c) a key DONE within its ttl is never executed again */
     sink_max = fence
  :: else -> skip
  fi
}

/* One delivery per worker: each worker is one process that handles one delivery of the same
 * message (the same key). */
active [N] proctype worker() {
  byte id = _pid;
  byte tok = _pid + 1;     /* this claim call's token */
  byte deadline, fence, epoch, ans;
  bool retried, releasing;

  assert(_pid < N);
  deadline = now + LIFE;
claim_call:
  atomic {
    if
    :: now >= deadline -> goto gone
    :: else -> claim(id, tok, ans, fence, epoch)
    fi
  }
  if
  :: !retried -> retried = 1; ans = 0; fence = 0; epoch = 0; goto claim_call  /* reply lost */
  :: ans != WON -> goto gone      /* AlreadyDone: ack; HeldByOther: nack */
  :: ans == WON -> skip
  :: goto gone                    /* crash */
  fi;
  ans = 0;
  /* a heartbeat, or none */
  if
  :: atomic { now < deadline -> extend(id, tok, fence, epoch, ans) }; ans = 0
  :: skip
  :: goto gone                    /* crash */
  fi;
  atomic {
    if
    :: now >= deadline -> goto gone
    :: else -> effect(fence)
    fi
  }
  if
  :: goto gone                    /* crash after the effect, before complete: the window */
  :: releasing = 1                /* the work failed: release (and nack) instead */
  :: skip
  fi;
  ans = 0; retried = 0;
complete_call:
  atomic {
    if
    :: now >= deadline -> goto gone
    :: now < deadline && releasing -> release(id, fence, epoch, ans); goto gone
    :: now < deadline && !releasing -> complete(id, fence, epoch, ans)
    fi
  }
  if
  :: !retried -> retried = 1; ans = 0; goto complete_call  /* reply lost: complete again */
  :: skip
  fi;
gone:
  skip
}

active proctype ticker() {
  do
  :: d_step { now < MAXT -> now++ }
  :: now >= MAXT -> break
  od
}

#ifndef NO_PURGE
/* purge_expired / Redis's PEXPIREAT / the memory backend's sweep: any record past expires_at
 * may vanish at any moment. */
active proctype reaper() {
end:
  do
  :: atomic { r_exists && now >= r_exp -> drop_record() }
  od
}
#endif

/* (a) at most one live owner (a granted claim whose lease has not lapsed) at any instant. */
active proctype monitor() {
end:
  atomic { TWO_LIVE -> assert(false) }
}
