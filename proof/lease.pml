/*
 * lease.pml: the lease protocol of lease_integrations, for the SPIN model checker.
 *
 *   spin -a proof/lease.pml && cc -O1 -DSAFETY -o pan pan.c && ./pan -m1000000
 *   spin -a -DMUTANT_NO_MARGIN proof/lease.pml ...     (each mutant must fail)
 *
 * docs/concepts/proof.md states the assumptions and properties in words;
 * tests/proof/test_spin_model.py runs the model and its mutants.
 *
 * Actors and the code they stand for:
 *   Clock   - time: the store's clock (`now`, one tick per step), each holder's
 *             time.monotonic() (lc(i)) and the fail-stop deadline (core/failstop.py).
 *   Store   - the faults around the store: an operator's force_release (cli.py
 *             `leasectl break`), data loss (the record and its token counter
 *             gone) and failover to a replica that missed renewals (stores/*.py).
 *             The store's own operations (acquire, renew, release) are atomic
 *             steps inside Holder, run where the request reaches the store.
 *   Holder  - one process holding the key (core/lock.py LeaseLock.hold, Hold),
 *             with its heartbeat (core/heartbeat.py), trust window
 *             (core/lease.py Lease), loss policy (on_lost="exit" or "check")
 *             and fenced writes (core/fencing/: a guard in the resource).
 *   Monitor - property 3, checked in every reachable state.
 *
 * Units: one tick = a quarter of the ttl.  TTL 4, MARGIN 2: the holder trusts a
 * lease for W = TTL - MARGIN = 2 ticks after the start of the attempt that
 * granted or renewed it.  Fail-stop ends the process within STOP = MARGIN -
 * DRIFT ticks after its trust window closes: the code's split of the margin
 * (0.8 for the ladder, 0.2 for drift: core/failstop.py STOP_SHARE) at the
 * integers the model can afford.
 *
 * The test runs two configurations: -DHORIZON=7 -DMAXFAULTS=0 ("clocks") and
 * -DHORIZON=5 -DMAXFAULTS=1 ("faults").
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
#define TTL      4
#define MARGIN   2
#define DRIFT    1      /* a holder's clock may lose this many ticks (below) */
#ifdef MUTANT_SLOW_STOP
#define STOP     MARGIN /* mutant: the ladder may take the whole margin */
#else
#define STOP     (MARGIN - DRIFT)   /* the fail-stop ladder's budget */
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
byte gtime;             /* store time of the last grant (no grant twice in a tick) */
byte nfaults;

/* ---- the fenced resource (core/fencing: the high-water token) ----------- */
byte fmax;              /* highest token accepted */

/* ---- the holders -------------------------------------------------------- */
byte hpc[N];            /* phase */
byte htok[N];           /* token of the lease held */
byte as[N];             /* local time the acquire attempt started */
byte tu[N];             /* trusted until, on the holder's clock (Lease._trusted_until) */
bit  lost[N];           /* Lease.lost */
bit  pol[N];            /* on_lost policy of the current block */
byte rpc[N];            /* renewal: 0 none, 1 in flight, 2 answered ok, 3 refused */
byte rs[N];             /* local time the renewal attempt started */
bit  ns[N];             /* 1 once this holder's clock has slipped a tick behind the store's */

/* ---- ghosts: what an observer knows, never read by the protocol --------- */
byte maxg;              /* highest token ever granted (survives data loss) */
bit  cut[N];            /* its live record was broken, deleted or rolled back */
bit  gone[N];           /* the lease was lost: another holder was granted the key,
                           or the record was broken or deleted, while it held it */
bit  ovr[N];            /* a pause stretched its fail-stop past STOP (assumption broken) */

#define lc(i)      (now - ns[i])            /* holder i's monotonic clock */
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

/* A holder leaves its lease behind: clear what it no longer reads. */
inline forget(i) {
  rpc[i] = 0; rs[i] = 0; tu[i] = 0; lost[i] = 0; htok[i] = 0;
  cut[i] = 0; gone[i] = 0; ovr[i] = 0
}

/* ---- Clock -------------------------------------------------------------
 * Each store tick moves every holder's clock one tick too, except that a
 * holder's clock may slip (stay put) once in the run: over any stretch of the
 * run (HORIZON < 2 * TTL) it lags the store's by at most one tick, a rate
 * within 1/TTL of the store's over a ttl.  A clock that runs fast only ends
 * trust and fail-stop earlier (the store alone judges expiry, and every
 * holder-side bound here is an upper bound), so it is left out.
 *
 * Pauses: every step of a holder may wait any number of ticks (a holder that
 * does not act is paused: SIGSTOP, a VM pause, a long GC).  The one bound is
 * fail-stop's (core/failstop.py): a holder in a block under on_lost="exit" is
 * gone before its clock reaches tu + STOP.  The tick that would get it there
 * either waits for it or, if the process was paused across that instant,
 * passes and marks the run (ovr): "a pause longer than the margin".
 */
#define due(i)     (hpc[i] == BLK && pol[i] == EXIT && lc(i) + 1 >= tu[i] + STOP)

inline step_clock(i) {
  if
  :: !due(i) -> skip
  :: due(i) -> ovr[i] = 1                  /* paused across its deadline */
  :: !ns[i] -> ns[i] = 1                   /* this holder's clock slips */
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
 *  - force_release: the operator's break (`leasectl break`, the Leases page);
 *  - data loss: the record and the token counter are gone (a deleted Redis
 *    hash or MongoDB document, FLUSHALL, a restart without persistence, a
 *    failover to a replica that never had them; the SQL stores keep the
 *    counter in its own table, so they lose less);
 *  - failover to a lagging replica that missed the latest renewals: the
 *    record is the same grant with an earlier expiry (never before its grant
 *    time + TTL): the store may grant the key again while its holder trusts it.
 */
active proctype Store() {
end:
  do
  :: atomic { nfaults < MAXFAULTS && rh != 0 ->                      /* force_release */
       nfaults++; cut_owner(1); rh = 0 }
  :: atomic { nfaults < MAXFAULTS && (rh != 0 || ctr != 0) ->        /* data loss */
       nfaults++; cut_owner(1); rh = 0; rtok = 0; ctr = 0 }
  :: atomic { nfaults < MAXFAULTS && rh != 0 && rexp > gtime + TTL ->  /* failover */
       nfaults++; cut_owner(0);
       do
       :: rexp > gtime + TTL -> rexp--
       :: break
       od }
  od
}

/* ---- Holder ---------------------------------------------------------------
 * Every step is atomic and may wait any number of ticks (a pause).  Steps of
 * the store (a request arriving there) are separate from the holder's own:
 * requests in flight are delayed for any time, and land even while (or after)
 * the process that sent them is paused (or gone).
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
#ifdef MUTANT_NO_FLOOR
       htok[i] = ctr + 1;
#else
       htok[i] = max(ctr + 1, now);
#endif
       assert(htok[i] > maxg);              /* P1: never granted twice, rising */
       maxg = htok[i];
       for (j : 0 .. N-1) {
         if
         :: j != i && hpc[j] >= GOT && hpc[j] <= BLK ->
              gone[j] = 1;
              /* P4: with fail-stop no block of another holder still runs */
              assert(hpc[j] != BLK || pol[j] != EXIT || cut[j] || ovr[j])
         :: else -> skip
         fi
       }
       rh = i + 1; rtok = htok[i]; rexp = now + TTL; ctr = htok[i]; gtime = now;
       cut[i] = 0; gone[i] = 0; ovr[i] = 0; lost[i] = 0;
       hpc[i] = GOT }
  :: atomic { hpc[i] == ACQ && live -> hpc[i] = IDLE; as[i] = 0 }   /* busy: LeaseBusy */

  /* the grant arrives: trust from the attempt's start (Lease.__init__);
     Hold.__enter__: a lease lost already never runs the block */
  :: atomic { hpc[i] == GOT ->
       tu[i] = as[i] + W; as[i] = 0;
       if
       :: lc(i) >= tu[i] ->                          /* LeaseLost at entry */
            if :: rh == i + 1 && rtok == htok[i] -> rh = 0 :: else -> skip fi;
            hpc[i] = IDLE; forget(i)
       :: else ->
            pol[i] = i % 2;        /* holder 0 (and 2): "exit"; holder 1: "check" */
            hpc[i] = BLK
       fi }

  /* the block's work: a fenced write (core/fencing: accept iff token >= mark) */
  :: atomic { hpc[i] == BLK ->
       if
       :: htok[i] >= fmax ->
            assert(htok[i] >= fmax);   /* P2: never older than one accepted (equal
                                          tokens are one grant's: P1) */
            fmax = htok[i]
       :: else -> skip                                /* StaleToken */
       fi }

  /* heartbeat: start a renewal (Heartbeat._renew_batch: started = monotonic()) */
  :: atomic { hpc[i] == BLK && !lost[i] && rpc[i] == 0 ->
       rs[i] = lc(i); rpc[i] = 1 }

  /* store.renew, atomic at the store: owner secret and token match, unexpired */
  :: atomic { rpc[i] == 1 ->
       ok = (rh == i + 1 && rtok == htok[i] && now < rexp);
       if :: ok -> rexp = now + TTL; rpc[i] = 2 :: else -> rpc[i] = 3 fi;
       ok = 0 }

  /* the renewal's answer (Lease.renewed / Heartbeat._settle) */
  :: atomic { rpc[i] >= 2 && hpc[i] == BLK ->
       if
       :: rpc[i] == 2 && !lost[i] ->
#ifdef MUTANT_REPLY_TIME
            tu[i] = max(tu[i], lc(i) + W);   /* mutant: from the answer */
#else
            tu[i] = max(tu[i], rs[i] + W);
#endif
       :: rpc[i] == 2 && lost[i] -> skip           /* never resurrects a lost lease */
       :: rpc[i] == 3 -> lost[i] = 1; tu[i] = min(tu[i], lc(i))
       fi;
       rpc[i] = 0; rs[i] = 0 }

  /* the heartbeat's deadline (Heartbeat._check_deadline) or lease.check() */
  :: atomic { hpc[i] == BLK && !lost[i] && lc(i) >= tu[i] -> lost[i] = 1 }

  /* fail-stop ends the process (failstop.stop_process, os._exit(75)) */
  :: atomic { hpc[i] == BLK && pol[i] == EXIT && (lost[i] || lc(i) >= tu[i]) ->
       hpc[i] = DEAD; forget(i) }
  /* a new process takes its place (the orchestrator's retry) */
  :: atomic { hpc[i] == DEAD -> hpc[i] = IDLE }

  /* the block ends normally: Hold.__exit__ -> release, verdict() */
  :: atomic { hpc[i] == BLK ->
       closed = (lc(i) >= tu[i]);
       refused = !(rh == i + 1 && rtok == htok[i]);   /* store.release: secret + token */
       if :: !refused -> rh = 0 :: else -> skip fi;
       /* P5: a block whose lease was lost never ends as a success */
       assert(lost[i] || refused || closed || !gone[i]);
       closed = 0; refused = 0;
       hpc[i] = IDLE; forget(i) }

  /* anyone may call release with what store.get shows (the token) and its
     own secret: the store must refuse it */
  :: atomic { hpc[i] == IDLE && rh != 0 && rh != i + 1 ->
#ifdef MUTANT_NO_SECRET
       rh = 0                                      /* mutant: the token is enough */
#else
       if :: rh == i + 1 -> rh = 0 :: else -> skip fi
#endif
     }
  od
}

/* P3: no two holders trust their lease at the same store instant, unless a
   break or a data loss took one's record away (the fencing token covers that). */
#if N == 3
#define P3 ((!(trusts(0) && trusts(1)) || cut[0] || cut[1]) && \
            (!(trusts(0) && trusts(2)) || cut[0] || cut[2]) && \
            (!(trusts(1) && trusts(2)) || cut[1] || cut[2]))
#else
#define P3 (!(trusts(0) && trusts(1)) || cut[0] || cut[1])
#endif

active proctype Monitor() {
end:
  atomic { !P3 -> assert(false) }
}

init {
  byte k;
  atomic { for (k : 0 .. N-1) { run Holder(k) } }
}
