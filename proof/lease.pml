/*
 * lease.pml: the lease protocol of lease_integrations, for the SPIN model checker.
 *
 *   spin -a -DHORIZON=7 -DMAXFAULTS=0 proof/lease.pml && cc -O1 -DSAFETY -o pan pan.c && ./pan
 *   spin -a -DHORIZON=7 -DMAXFAULTS=0 -DMUTANT_NO_STOP proof/lease.pml ...  (each mutant fails)
 *
 * docs/concepts/proof.md states the assumptions and properties in words;
 * tests/proof/test_spin_model.py runs the model and every mutant.
 *
 * Actors and the code they stand for:
 *   Clock   - time: the store's clock (`now`, one tick per step) and each
 *             host's CLOCK_BOOTTIME (lc(i)), which the job and its keeper share.
 *             The one thing the environment may do to a holder's deadline is a
 *             whole-host pause (below).
 *   Store   - the faults around the store: an operator's break, unconditional
 *             or conditional on the token the operator looked at
 *             (force_release(key, by, token=N): `leasectl break --token`), data
 *             loss (the record and its token counter gone) and failover to a
 *             replica that missed renewals (stores/*.py).  The store's own
 *             operations (acquire, renew, release) are atomic steps inside
 *             Holder, taken where the request reaches the store.
 *   Holder  - one job process holding the key (lock.py LeaseLock.hold,
 *             hold_adopted, Hold) together with its keeper process
 *             (core/keeper*.py: renewals, the trust window, the hard stop),
 *             its loss policy (on_lost="exit" or "check") and its fenced writes
 *             (core/fencing/: a guard in the resource), which travel to the
 *             resource on their own and may land after the job is gone.
 *   Monitor - properties 3, 4 and 6, checked in every reachable state.
 *
 * Units: one tick = a quarter of the ttl.  TTL 4, MARGIN 2: the holder trusts a
 * lease for W = TTL - MARGIN = 2 ticks after the start of the attempt that
 * granted or renewed it (the trust window closes at tu).  The keeper's hard
 * stop (stop_at = W + 0.7*margin - grace, everything gone by W + 0.8*margin,
 * its kernel timer at W + 0.9*margin) must be complete before the host's
 * clock reaches tu + STOP, STOP = MARGIN - DRIFT = 1 tick: the model's tick is
 * half a margin, so it grants the stop half the margin and drift the other
 * half (the code: 0.8 and 0.2).
 *
 * The test runs two configurations: -DHORIZON=7 -DMAXFAULTS=0 ("clocks") and
 * -DHORIZON=4 -DMAXFAULTS=1 ("faults").
 *
 * Assumptions (the same list as docs/concepts/proof.md, "Assumptions"):
 *  A1 time is discrete (a tick is ttl/4); the horizon is 7 ticks (clocks) or 4 (faults).
 *  A2 a host's clock lags the store's by at most DRIFT = 1 tick over a run;
 *     a fast clock only ends trust earlier (left out).
 *  A3 the store's clock ticks between two grants of a key and does not go
 *     back across a loss (the token floor: Redis, PostgreSQL, SQLite and
 *     memory floor with a microsecond clock; MongoDB's $$NOW has
 *     milliseconds: a document lost and its key granted again within the
 *     server millisecond of the grant before reissues that token).
 *  A4 the keeper is never starved: a stop that is due is made before the
 *     clock moves on (the tick is half the margin: the stop gets half, drift
 *     the other half; the code: 0.8 and 0.2), unless the whole host is
 *     paused (a VM freeze: job, keeper and kernel timers together): that
 *     holder is then exempt from P3 and P4 and only the fence protects (A5).
 *  A5 the resource checks the token on every write (core/fencing).
 *  A6 at most MAXFAULTS (0 or 1) store faults per run; two holders, one key;
 *     no adoption by a second process, no batching; descendants are frozen
 *     as part of the stop.
 *  A7 a release or renewal that fails either took effect at the store or did
 *     not; a failed release is let take effect and a renewal still in flight
 *     when its holder leaves is dropped (-DORPHANS keeps it): landing, either
 *     only keeps alive a record nobody here trusts, which delays others'
 *     grants, and a delayed grant is also reachable by a pause.
 */

#ifndef N
#define N        2      /* holders */
#endif
#ifndef HORIZON
#define HORIZON  7      /* store ticks explored (tokens are store times: bounded) */
#endif
#ifndef MAXFAULTS
#define MAXFAULTS 0     /* breaks, data losses and failovers per run (the test: 0 and 1) */
#endif
#ifndef MAXSUP
#define MAXSUP   0      /* supersedes per run (the test's "supersede" configuration: 1) */
#endif
#define TTL      4
#define MARGIN   2
#ifdef MUTANT_DRIFT_BEYOND
#define DRIFT    2      /* mutant: a clock lags by more than the bound */
#else
#define DRIFT    1      /* a holder's clock may lose this many ticks (below) */
#endif
#define STOP     1      /* MARGIN - (the drift bound, 1 tick): the stop's budget */
#ifdef MUTANT_SLOW_STOP
#define BUDGET   MARGIN /* mutant: the stop may take the whole margin */
#else
#define BUDGET   STOP
#endif

#ifdef MUTANT_NO_MARGIN
#define W        TTL    /* mutant: the holder trusts the lease for the whole ttl */
#else
#define W        (TTL - MARGIN)
#endif

/* holder phases */
#define IDLE  0         /* no lease; may try to acquire */
#define ACQ   1         /* acquire request on its way to the store */
#define GOT   2         /* granted; the answer on its way back */
#define BLK   3         /* inside the hold() block */
#define DEAD  4         /* ended by fail-stop */
#define SUPW  5         /* supersede: granted, waiting for the old holder to be gone */
/* on_lost policies */
#define EXIT  0
#define CHECK 1

/* ---- the store: one key ------------------------------------------------ */
byte now = 1;           /* the store's clock */
byte rh;                /* record holder: 0 = none / released, else i+1.  The holder's
                           owner secret is modelled by the same number: only holder i
                           knows it (a new 128-bit secret per acquire in the code) */
byte rtok;              /* record token */
byte rexp;              /* record expires_at, on the store's clock */
byte ctr;               /* last token granted, as the store remembers it */
byte gtime;             /* store time of the last grant (A3: no grant twice in a tick) */
byte nfaults;
byte look;              /* the token an operator read (store.get) before a conditional break */
byte nsup;              /* supersedes so far */

/* ---- the fenced resource (core/fencing: the high-water token) ----------- */
byte fmax;              /* highest token accepted */

/* ---- the holders -------------------------------------------------------- */
byte hpc[N];            /* phase */
byte htok[N];           /* token of the lease held */
byte as[N];             /* local time the acquire attempt started */
byte tu[N];             /* trusted until, on the host's clock (the keeper's window) */
bit  lost[N];           /* Lease.lost */
byte rpc[N];            /* renewal: 0 none, 1 in flight, 2 answered ok, 3 refused */
byte rs[N];             /* local time the renewal attempt started */
byte orph[N];           /* token of a renewal still in flight after its holder left */
byte ns[N];             /* ticks this host's clock has slipped behind the store's */
byte wtok[N];           /* token of a fenced write in flight to the resource (0: none) */
byte supv[N];             /* supersede: the holder (j+1) whose lease holder i broke, 0: none */
byte supw[N];             /* supersede: the broken record's expiry, on the store's clock */

/* ---- ghosts: what an observer knows, never read by the protocol --------- */
byte maxg;              /* highest token ever granted (survives data loss) */
bit  ep;                /* data losses so far (MAXFAULTS <= 1).  Grant order is
                           (ep, token): the counter only restarts at a loss, so
                           between two losses tokens rise with every grant */
bit  hep[N];            /* ep of holder i's grant */
bit  wep[N];            /* ep of the grant of holder i's write in flight */
bit  fep;               /* ep of the grant whose token is the resource's mark */
bit  badbreak;          /* a conditional break took a grant the operator did not read */
bit  cut[N];            /* its live record was broken, deleted or rolled back */
bit  gone[N];           /* the lease was lost: another holder was granted the key,
                           or the record was broken or deleted, while it held it */
bit  ovr[N];            /* a whole-host pause carried it past its stop deadline (A4) */

#define lc(i)      (now - ns[i])            /* host i's clock (CLOCK_BOOTTIME) */
#define pol(i)     ((i) % 2)                /* holder 0 (and 2): "exit"; holder 1: "check" */
#define live       (rh != 0 && now < rexp)  /* the store counts the record held */
#define trusts(i)  (hpc[i] == BLK && !lost[i] && lc(i) < tu[i])
#define max(a, b)  ((a) > (b) -> (a) : (b))
#define min(a, b)  ((a) < (b) -> (a) : (b))

/* The live record of a holder is about to vanish (taken: the lease is lost)
   or to expire sooner than it was renewed for (taken = 0: lost only if the
   store then grants the key to another holder, which sets `gone` itself). */
inline cut_owner(taken) {
  if
  :: live && hpc[rh-1] >= GOT && hpc[rh-1] <= BLK && htok[rh-1] == rtok ->
       cut[rh-1] = 1; gone[rh-1] = taken
  :: else -> skip
  fi
}

/* The resource decides a write (core/fencing: accept iff token >= mark). */
inline fence(i, tok, e) {
  if
  :: tok >= fmax ->
       printf("t%d H%d write tok%d accepted | ", now, i, tok);
       assert(e >= fep);   /* P2: never a write of an older grant after a newer grant's write */
       fmax = tok; fep = e
  :: else -> printf("t%d H%d write tok%d refused | ", now, i, tok)   /* StaleToken */
  fi
}

/* The record is released, broken or gone: what is left of it is never read
   again (its token lives on in ctr), so clear it. */
inline free_record() { rh = 0; rtok = 0; rexp = 0 }

/* A holder leaves its lease behind: clear what it no longer reads.  A write
   already sent stays in flight and may still land; so does a renewal with
   -DORPHANS (A7). */
inline forget(i) {
#ifdef ORPHANS
  if :: rpc[i] == 1 -> orph[i] = htok[i] :: else -> skip fi;
#endif
  rpc[i] = 0; rs[i] = 0; tu[i] = 0; lost[i] = 0; htok[i] = 0; hep[i] = 0;
  cut[i] = 0; gone[i] = 0; ovr[i] = 0; supv[i] = 0; supw[i] = 0
}

/* ---- the keeper's hard stop ---------------------------------------------
 * stop_due(i): the keeper is to stop job i (SIGSTOP it and its descendants,
 * SIGKILL): its block runs under on_lost="exit" and its trust window has
 * closed, or a renewal was refused (which closes the window at once).
 * urgent(i): the stop is due and one more tick would carry the host's clock
 * to tu + BUDGET: the clock may not tick (A4) unless the whole host is paused.
 * The stop is a step of the implementation: delete it and nothing holds time
 * back; start it late and it comes after the store's expiry.
 */
#if defined(MUTANT_NO_STOP)
#define stop_due(i) 0
#elif defined(MUTANT_LATE_STOP)
#define stop_due(i) (hpc[i] == BLK && pol(i) == EXIT && lc(i) >= tu[i] + STOP)
#else
#define stop_due(i) (hpc[i] == BLK && pol(i) == EXIT && (lost[i] || lc(i) >= tu[i]))
#endif
#define urgent(i)  (stop_due(i) && lc(i) + 1 >= tu[i] + BUDGET)

/* ---- Clock -------------------------------------------------------------
 * Each store tick moves every host's clock one tick too, except that a host's
 * clock may slip (stay put) up to DRIFT times in the run: it lags the store's
 * by at most DRIFT ticks (A2).  Pauses of the job alone (SIGSTOP, GC, the
 * GIL): every step of a holder may wait any number of ticks, and the keeper
 * does not renew a stopped job (renewals are optional steps here).  The only
 * pause that defers a due stop is the whole host's: the tick then marks ovr.
 */
inline step_clock(i) {
  if
  :: !urgent(i) -> skip
  :: urgent(i) -> ovr[i] = 1; printf("t%d host %d paused | ", now + 1, i)   /* the whole host paused across it */
  fi;
  if
  :: ns[i] < DRIFT -> ns[i]++; printf("t%d H%d clock slips | ", now + 1, i)   /* this host's clock slips */
  :: true -> skip
  fi
}

active proctype Clock() {
end:
  do
  :: atomic { now < HORIZON ->
       step_clock(0); step_clock(1);
#if N == 3
       step_clock(2);
#endif
       now++ }
  od
}

/* ---- Store faults ------------------------------------------------------
 * At most MAXFAULTS per run, at any moment:
 *  - force_release: the operator's break (`leasectl break`, the Leases page),
 *    unconditional, or with the token the operator read earlier (`look`):
 *    the store checks it and breaks in one step;
 *  - data loss: the record and the token counter are gone (a deleted Redis
 *    hash or MongoDB document, a deleted SQLite file or one restored from a
 *    backup, FLUSHALL, a restart without persistence, a failover to a replica
 *    that never had them);
 *  - failover to a lagging replica that missed the latest renewals: the
 *    record is the same grant with an earlier expiry (never before its grant
 *    time + TTL): the store may grant the key again while its holder trusts it.
 */
active proctype Store() {
end:
  do
  :: atomic { nfaults < MAXFAULTS && rh != 0 ->                      /* force_release */
       nfaults++; printf("t%d BREAK | ", now); cut_owner(1); free_record() }
  :: atomic { nfaults < MAXFAULTS && rh != 0 ->                      /* store.get ... */
       nfaults++; look = rtok; printf("t%d operator reads tok%d | ", now, look) }
  :: atomic { look != 0 ->                           /* ... then force_release(token=) */
#ifdef MUTANT_BREAK_NO_TOKEN
       if :: rh != 0 ->                            /* mutant: the token is not checked */
#else
       if :: rh != 0 && rtok == look ->
#endif
            badbreak = (rtok != look); printf("t%d BREAK tok%d (read tok%d) | ", now, rtok, look);
            cut_owner(1); free_record()
       :: else -> skip                             /* None: nothing was broken */
       fi;
       look = 0 }
  :: atomic { nfaults < MAXFAULTS && (rh != 0 || ctr != 0) ->        /* data loss */
       nfaults++; printf("t%d DATA LOSS | ", now); cut_owner(1); free_record(); ctr = 0; ep = 1 }
  :: atomic { nfaults < MAXFAULTS && rh != 0 && rexp > gtime + TTL ->  /* failover */
       nfaults++; printf("t%d FAILOVER | ", now); cut_owner(0); rexp--;            /* lowers the expiry at least once */
       do
       :: rexp > gtime + TTL -> rexp--
       :: break
       od }
  od
}

/* ---- Holder ---------------------------------------------------------------
 * Every step is atomic and may wait any number of ticks (a pause), except the
 * keeper's stop (A4).  Steps of the store (a request arriving there) are
 * separate from the holder's own: requests in flight are delayed for any time,
 * and land even while (or after) the process that sent them is paused (or gone).
 */
proctype Holder(byte i) {
  bit ok, closed, refused;
  byte j;
end:
  do
  /* LeaseLock.acquire: note the attempt's start, send the request */
  :: atomic { hpc[i] == IDLE -> as[i] = lc(i); hpc[i] = ACQ }

  /* store.acquire, atomic at the store: granted iff free, released or
     expired by the store's clock; the token is floored by the store's clock */
  :: atomic { hpc[i] == ACQ && !live && now > gtime ->
#if defined(MUTANT_NO_FLOOR)
       htok[i] = ctr + 1;
#elif defined(MUTANT_COARSE_FLOOR)
       htok[i] = max(ctr + 1, now / 2);   /* mutant: a clock that ticks every other grant */
#else
       htok[i] = max(ctr + 1, now);
#endif
       printf("t%d H%d granted tok%d | ", now, i, htok[i]);
#ifndef NO_P1
       assert(htok[i] > maxg);              /* P1: never granted twice, rising */
#endif
       maxg = max(maxg, htok[i]);
       for (j : 0 .. N-1) {
         if
         :: j != i && hpc[j] >= GOT && hpc[j] <= BLK -> gone[j] = 1
         :: else -> skip
         fi
       }
       rh = i + 1; rtok = htok[i]; rexp = now + TTL; ctr = htok[i]; gtime = now;
       hep[i] = ep;
       cut[i] = 0; gone[i] = 0; ovr[i] = 0; lost[i] = 0;
       hpc[i] = GOT }
  :: atomic { hpc[i] == ACQ && live -> hpc[i] = IDLE; as[i] = 0 }   /* busy: LeaseBusy */

  /* supersede (keeper/supersede.py): busy, so break the holder's token (the one
     read: force_release(key, by, token)), note the broken record's expiry,
     and take the key at once, before anyone else can; the block waits (SUPW) */
  :: atomic { hpc[i] == ACQ && live && rh != i + 1 && nsup < MAXSUP && now > gtime ->
       nsup++; supv[i] = rh; supw[i] = rexp;
       printf("t%d H%d supersedes H%d tok%d | ", now, i, rh - 1, rtok);
       cut_owner(1); free_record();
       htok[i] = max(ctr + 1, now);
       printf("t%d H%d granted tok%d | ", now, i, htok[i]);
       assert(htok[i] > maxg);              /* P1 */
       maxg = max(maxg, htok[i]);
       rh = i + 1; rtok = htok[i]; rexp = now + TTL; ctr = htok[i]; gtime = now;
       hep[i] = ep; lost[i] = 0;
       tu[i] = as[i] + W; as[i] = 0;        /* trusted from the attempt's start */
       hpc[i] = SUPW }
  /* the wait ends: the old holder's process is gone (same host: its pid), or
     the store's clock reached the broken record's expiry */
  :: atomic { hpc[i] == SUPW &&
#if defined(MUTANT_SUPERSEDE_NO_WAIT)
       true ->
#elif defined(MUTANT_SUPERSEDE_SHORT_WAIT)
       (hpc[supv[i] - 1] == DEAD || hpc[supv[i] - 1] == IDLE || now + 1 >= supw[i]) ->
#else
       (hpc[supv[i] - 1] == DEAD || hpc[supv[i] - 1] == IDLE || now >= supw[i]) ->
#endif
       if
       :: lost[i] || lc(i) >= tu[i] ->              /* LeaseLost before the block */
            printf("t%d H%d superseded in turn: LeaseLost | ", now, i);
            if :: rh == i + 1 && rtok == htok[i] -> free_record() :: else -> skip fi;
            hpc[i] = IDLE; forget(i)
       :: else ->
            printf("t%d H%d block starts after the supersede (trusts until %d) | ", now, i, tu[i]);
            hpc[i] = BLK
       fi }

  /* the grant arrives: trust from the attempt's start (Lease.__init__);
     _answered_in_window: a grant answered after its window never runs the block */
  :: atomic { hpc[i] == GOT ->
#ifdef MUTANT_GRANT_REPLY_TIME
       tu[i] = lc(i) + W; as[i] = 0;        /* mutant: trust from the answer */
#else
       tu[i] = as[i] + W; as[i] = 0;
#endif
       if
#ifndef MUTANT_NO_LATE_GRANT_CHECK
       :: lc(i) >= tu[i] ->                          /* LeaseLost at entry */
            printf("t%d H%d grant answered late: LeaseLost | ", now, i);
            if :: rh == i + 1 && rtok == htok[i] -> free_record() :: else -> skip fi;
            hpc[i] = IDLE; forget(i)
#endif
       :: else ->
            printf("t%d H%d block starts (trusts until %d) | ", now, i, tu[i]);
            hpc[i] = BLK
       fi }

  /* the block's work: a fenced write.  Holder 0's ("exit") travels to the
     resource on its own and lands whenever it lands, the job alive, stopped
     or gone; holder 1's is decided as it is sent (a write in flight of a
     "check" holder is the same case, modelled once). */
  :: atomic { hpc[i] == BLK && wtok[i] == 0 ->
       if
       :: pol(i) == EXIT -> wtok[i] = htok[i]; wep[i] = hep[i];
            printf("t%d H%d sends write tok%d | ", now, i, wtok[i])
       :: else -> fence(i, htok[i], hep[i])
       fi }
  :: atomic { wtok[i] != 0 -> fence(i, wtok[i], wep[i]); wtok[i] = 0; wep[i] = 0 }

  /* keeper: start a renewal (started = the host's clock) */
  :: atomic { (hpc[i] == BLK || hpc[i] == SUPW) && !lost[i] && rpc[i] == 0 ->
       rs[i] = lc(i); rpc[i] = 1; printf("t%d H%d renewal sent | ", now, i) }

  /* store.renew, atomic at the store: owner secret and token match, unexpired */
  :: atomic { rpc[i] == 1 ->
       ok = (rh == i + 1 && rtok == htok[i] && now < rexp);
       if :: ok -> rexp = now + TTL; rpc[i] = 2; printf("t%d store renews H%d to %d | ", now, i, rexp)
          :: else -> rpc[i] = 3 fi;
       ok = 0 }
  /* a renewal whose holder left lands all the same */
  :: atomic { orph[i] != 0 ->
       if :: rh == i + 1 && rtok == orph[i] && now < rexp -> rexp = now + TTL
          :: else -> skip fi;
       orph[i] = 0 }

  /* the renewal's answer: the keeper's window, "renewed" / "lost" to the job */
  :: atomic { rpc[i] >= 2 && (hpc[i] == BLK || hpc[i] == SUPW) ->
       if
       :: rpc[i] == 2 && !lost[i] ->
#ifdef MUTANT_REPLY_TIME
            tu[i] = max(tu[i], lc(i) + W);   /* mutant: from the answer */
            printf("t%d H%d renewed, trusts until %d | ", now, i, tu[i]);
#else
            tu[i] = max(tu[i], rs[i] + W);
            printf("t%d H%d renewed, trusts until %d | ", now, i, tu[i]);
#endif
       :: rpc[i] == 2 && lost[i] -> skip           /* never resurrects a lost lease */
       :: rpc[i] == 3 -> lost[i] = 1; tu[i] = min(tu[i], lc(i));
            printf("t%d H%d renewal refused | ", now, i)
       fi;
       rpc[i] = 0; rs[i] = 0 }

  /* the window closes (the keeper's "lost", or lease.check()) */
  :: atomic { (hpc[i] == BLK || hpc[i] == SUPW) && !lost[i] && lc(i) >= tu[i] -> lost[i] = 1 }

  /* the job's own ladder (callbacks, face hooks, os._exit(75)): whenever its
     interpreter gets to it, which may be never */
  :: atomic { hpc[i] == BLK && pol(i) == EXIT && (lost[i] || lc(i) >= tu[i]) ->
       printf("t%d H%d ladder exits | ", now, i); hpc[i] = DEAD; forget(i) }
  /* the keeper's hard stop: the job and its descendants stopped, then killed */
  :: atomic { stop_due(i) -> printf("t%d H%d stopped by keeper | ", now, i); hpc[i] = DEAD; forget(i) }
  /* a new process takes its place (the orchestrator's retry) */
  :: atomic { hpc[i] == DEAD -> hpc[i] = IDLE }

  /* the block ends: Hold.__exit__, "drop" to the keeper, then store.release
     (secret + token).  The release is answered, or it fails (store
     unreachable: StoreUnavailable).  A failed release is let reach the store
     here (A7): one that did not leaves the record to expire, which only
     delays the other holders. */
  :: atomic { hpc[i] == BLK ->
       closed = (lc(i) >= tu[i]);
       refused = !(rh == i + 1 && rtok == htok[i]);
       if :: !refused -> free_record() :: else -> skip fi;
       if
       :: ok = !lost[i] && !closed && !refused;    /* answered */
          printf("t%d H%d release refused=%d, block ends success=%d | ", now, i, refused, ok)
#ifdef MUTANT_RELEASE_ERROR_OK
       :: ok = !lost[i] && !closed;                /* mutant: an error is "not refused" */
#else
       :: ok = 0;                                  /* unconfirmed: LeaseLost */
#endif
          printf("t%d H%d release fails, block ends success=%d | ", now, i, ok)
       fi;
       assert(!ok || !gone[i]);   /* P5: a block whose lease was lost never ends as a success */
       ok = 0; closed = 0; refused = 0;
       hpc[i] = IDLE; forget(i) }

  /* hold_adopted(release=False) ends: the lease stays with another process
     (outside the bounds: A6); one renewal on exit confirms that it was still
     held, a refusal or an error is LeaseLost.  (The renewal's extension is
     left out: like any renewal nobody in the model trusts, it only delays.) */
  :: atomic { hpc[i] == BLK ->
       closed = (lc(i) >= tu[i]);
#ifdef MUTANT_KEEP_NO_CONFIRM
       ok = !lost[i] && !closed;                   /* mutant: nothing confirms it */
#else
       ok = rh == i + 1 && rtok == htok[i] && now < rexp && !lost[i] && !closed;
#endif
       printf("t%d H%d hold_adopted ends success=%d | ", now, i, ok);
       assert(!ok || !gone[i]);   /* P5 */
       ok = 0; closed = 0;
       hpc[i] = IDLE; forget(i) }

  /* anyone may call release with what store.get shows (the token) and its
     own secret: the store must refuse it */
  :: atomic { hpc[i] == IDLE && rh != 0 && rh != i + 1 ->
#ifdef MUTANT_NO_SECRET
       printf("t%d H%d releases tok%d with its own secret | ", now, i, rtok);
       free_record()                               /* mutant: the token is enough */
#else
       if :: rh == i + 1 -> free_record() :: else -> skip fi
#endif
     }
  od
}

/* P3: no two holders trust their lease at the same store instant, unless a
   break, a data loss or a failover took one's record away (the fence covers
   that).  A host pause exempts nobody here: it is past the window already. */
#if N == 3
#define P3 ((!(trusts(0) && trusts(1)) || cut[0] || cut[1]) && \
            (!(trusts(0) && trusts(2)) || cut[0] || cut[2]) && \
            (!(trusts(1) && trusts(2)) || cut[1] || cut[2]))
#else
#define P3 (!(trusts(0) && trusts(1)) || cut[0] || cut[1])
#endif
/* P4: with fail-stop, no block still runs once the store granted the key to
   another holder: same exceptions, and a whole-host pause (A4: fencing). */
#define runs_superseded(j) (hpc[j] == BLK && pol(j) == EXIT && gone[j] && !cut[j] && !ovr[j])
#if N == 3
#define P4 (!runs_superseded(0) && !runs_superseded(1) && !runs_superseded(2))
#else
#define P4 (!runs_superseded(0) && !runs_superseded(1))
#endif
/* P6: a conditional break never breaks a grant the operator did not read */
#define P6 (!badbreak)
/* P7: a superseding run's block never runs beside the fail-stop holder it
   replaced (that holder's tree is gone first), unless a whole-host pause
   carried the old one past its stop (A4: the fence). */
#define beside(j, i) (hpc[j] == BLK && pol(j) == EXIT && hpc[i] == BLK && supv[i] == j + 1 && !ovr[j])
#define P7 (!beside(0, 1) && !beside(1, 0))

active proctype Monitor() {
end:
  atomic { !(P3 && P4 && P6 && P7) -> assert(P3); assert(P4); assert(!badbreak); assert(P7) }
}

init {
  byte k;
  atomic { for (k : 0 .. N-1) { run Holder(k) } }
}
