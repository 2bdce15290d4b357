//! RFC 9562 UUID version 7: the layout, the ordering state and a fork-safe random stream.
//!
//! Pure Rust: no Postgres in here.
//!
//! ```text
//!  0              47 48  51 52        63 64 65 66      75 76                 127
//! | unix_ts_ms (48) | ver=7 | rand_a (12) | var=10 | counter lo (10) | random (52) |
//!                           \_ counter hi _/
//! ```
//!
//! Ordering uses the RFC's method 1, a fixed-length dedicated counter: 22 bits, the 12 bits of
//! rand_a and the first 10 of rand_b, leaving 52 bits drawn from a CSPRNG. The counter starts
//! each millisecond at a random value below 2^21 (so the count of ids per millisecond does not
//! show), and counts up from there: at least 2,097,152 ids per millisecond before it would carry
//! into the next millisecond. The RFC's sub-millisecond method (3) gives 12 bits of ~244 ns
//! ticks; one server-wide ordered stream at 10+ million ids per second would keep running ahead
//! of those ticks, so the counter is the honest choice here.

use rand_chacha::ChaCha12Rng;
use rand_core::{RngCore, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};

const COUNTER_BITS: u32 = 22;
const COUNTER_MAX: u64 = (1 << COUNTER_BITS) - 1;
/// The counter's random start each millisecond stays below this, leaving room to count up.
const COUNTER_START_LIMIT: u64 = 1 << (COUNTER_BITS - 1);
const RANDOM_BITS: u32 = 52;
/// The ordering word keeps 42 bits of milliseconds: enough until the year 2109.
const WORD_MILLIS_MAX: u64 = (1 << (64 - COUNTER_BITS)) - 1;
/// The largest timestamp a v7 UUID can carry (48 bits of ms).
pub const MAX_UNIX_MS: u64 = (1 << 48) - 1;

/// A v7 UUID from its parts; `counter` is taken mod 2^22 and `random` mod 2^52.
pub fn compose(unix_ms: u64, counter: u64, random: u64) -> [u8; 16] {
    debug_assert!(unix_ms <= MAX_UNIX_MS);
    let counter = u128::from(counter & COUNTER_MAX);
    let value = (u128::from(unix_ms & MAX_UNIX_MS) << 80)
        | (7u128 << 76)
        | ((counter >> 10) << 64)
        | (0b10u128 << 62)
        | ((counter & 0x3ff) << RANDOM_BITS)
        | u128::from(random & ((1 << RANDOM_BITS) - 1));
    value.to_be_bytes()
}

pub fn version(bytes: &[u8; 16]) -> u8 {
    bytes[6] >> 4
}

/// RFC 9562 variant: the two top bits of byte 8 are 10.
pub fn is_rfc_variant(bytes: &[u8; 16]) -> bool {
    bytes[8] >> 6 == 0b10
}

/// The Unix milliseconds of a version-7 UUID; None for any other version or variant.
pub fn timestamp_ms(bytes: &[u8; 16]) -> Option<u64> {
    (version(bytes) == 7 && is_rfc_variant(bytes))
        .then(|| (u128::from_be_bytes(*bytes) >> 80) as u64)
}

/// 100-ns ticks from 1582-10-15 (the Gregorian reform) to 1970-01-01.
const GREGORIAN_TO_UNIX_100NS: u64 = 122_192_928_000_000_000;

/// The Unix microseconds of a version-1 UUID (60-bit count of 100 ns since 1582-10-15), for
/// PostgreSQL 18's `uuid_extract_timestamp()`, which reads versions 1 and 7.
pub fn v1_timestamp_us(bytes: &[u8; 16]) -> Option<i64> {
    if version(bytes) != 1 || !is_rfc_variant(bytes) {
        return None;
    }
    let time_low = u64::from(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]));
    let time_mid = u64::from(u16::from_be_bytes([bytes[4], bytes[5]]));
    let time_hi = u64::from(u16::from_be_bytes([bytes[6], bytes[7]]) & 0x0fff);
    let ticks = (time_hi << 48) | (time_mid << 32) | time_low;
    Some((ticks as i64 - GREGORIAN_TO_UNIX_100NS as i64).div_euclid(10))
}

/// The smallest v7 UUID of a millisecond: counter and random bits zero. A bound for range scans.
pub fn boundary(unix_ms: u64) -> [u8; 16] {
    compose(unix_ms, 0, 0)
}

/// A v7 UUID for a given time, with no ordering state: for backfills from a stored timestamp.
pub fn at(unix_ms: u64, rng: &mut impl RngCore) -> [u8; 16] {
    compose(unix_ms, rng.next_u64(), rng.next_u64())
}

/// The next UUID from an ordering word shared by every caller (one backend, or every backend of
/// the server when it lives in shared memory). Strictly greater than every UUID made from the
/// same word before, whatever the clock does: when the clock is behind the last millisecond
/// issued, the counter continues in that millisecond instead.
///
/// The word holds the next UUID's `millis << 22 | counter`: one `fetch_add` per UUID, which
/// cannot fail. Only a caller whose value belongs to a millisecond that is over (the clock
/// moved on, or nothing was made for a while) gives it up and starts the clock's millisecond,
/// at a random counter, with one compare-and-swap.
pub fn next(word: &AtomicU64, now_unix_ms: u64, rng: &mut impl RngCore) -> [u8; 16] {
    let now = now_unix_ms.min(WORD_MILLIS_MAX);
    loop {
        crate::snowflake::probe::rmw();
        let value = word.fetch_add(1, Ordering::AcqRel);
        let (ms, counter) = (value >> COUNTER_BITS, value & COUNTER_MAX);
        if ms >= now {
            // This millisecond, or a later one the word reached by carrying a full counter or
            // because the clock went back.
            return compose(ms, counter, rng.next_u64());
        }
        let start = rng.next_u64() % COUNTER_START_LIMIT;
        let first = (now << COUNTER_BITS) | start;
        let mut seen = word.load(Ordering::Acquire);
        while seen >> COUNTER_BITS < now {
            crate::snowflake::probe::rmw();
            match word.compare_exchange(seen, first + 1, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return compose(now, start, rng.next_u64()),
                Err(now_seen) => {
                    crate::snowflake::probe::retry();
                    seen = now_seen;
                }
            }
        }
    }
}

/// The Unix millisecond of the last UUID made from this word (0 before any).
pub fn last_ms(word: &AtomicU64) -> u64 {
    word.load(Ordering::Acquire).saturating_sub(1) >> COUNTER_BITS
}

/// Moves the word past `horizon_unix_ms`, so that every later UUID sorts above every UUID made
/// at or before it: at start-up and in WAL replay, with the snowflake horizon. Never lowers it.
/// (The word holds the next UUID: the next one is at least the first of the millisecond after.)
pub fn raise_past(word: &AtomicU64, horizon_unix_ms: u64) {
    let floor = (horizon_unix_ms + 1).min(WORD_MILLIS_MAX) << COUNTER_BITS;
    word.fetch_max(floor, Ordering::AcqRel);
}

/// The random stream of one process: ChaCha12, a CSPRNG.
pub type Rng = ChaCha12Rng;

/// A CSPRNG (ChaCha12, seeded from the operating system) that reseeds whenever the process id
/// changes. State made before a fork — in the postmaster, say — is never shared by two
/// processes: each draws its own seed the first time it is used.
pub struct ForkSafeRng {
    owner: u32,
    rng: Option<ChaCha12Rng>,
}

impl ForkSafeRng {
    pub const fn new() -> Self {
        ForkSafeRng {
            owner: 0,
            rng: None,
        }
    }

    pub fn get(&mut self, pid: u32) -> &mut Rng {
        if self.owner != pid || self.rng.is_none() {
            self.owner = pid;
            self.rng = Some(ChaCha12Rng::from_entropy());
        }
        self.rng.as_mut().expect("seeded above")
    }
}

impl Default for ForkSafeRng {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const T0: u64 = 1_767_225_600_000;

    fn rng() -> ChaCha12Rng {
        ChaCha12Rng::seed_from_u64(7)
    }

    #[test]
    fn after_raise_past_every_uuid_sorts_above_the_horizon_even_with_the_clock_behind() {
        let word = AtomicU64::new(0);
        let mut r = rng();
        let old = next(&word, T0 + 5_000, &mut r);
        // A restart (or a promoted standby) whose clock is 10 s behind the old run's last UUID.
        let fresh = AtomicU64::new(0);
        raise_past(&fresh, T0 + 5_000);
        let new = next(&fresh, T0 - 5_000, &mut r);
        assert!(new > old);
        assert_eq!(timestamp_ms(&new), Some(T0 + 5_001));
        raise_past(&fresh, T0); // never lowers
        assert!(next(&fresh, T0, &mut r) > new);
        assert_eq!(last_ms(&fresh), T0 + 5_001);
    }

    proptest! {
        #[test]
        fn version_variant_and_timestamp_are_right_for_any_input(ms in 0..=MAX_UNIX_MS, c: u64, r: u64) {
            let bytes = compose(ms, c, r);
            let parsed = uuid::Uuid::from_bytes(bytes);
            prop_assert_eq!(parsed.get_version_num(), 7);
            prop_assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
            prop_assert_eq!(timestamp_ms(&bytes), Some(ms));
            let (secs, nanos) = parsed.get_timestamp().unwrap().to_unix();
            prop_assert_eq!(secs * 1000 + u64::from(nanos) / 1_000_000, ms);
        }

        /// Whatever the clock does, each UUID is greater than the last.
        #[test]
        fn strictly_increasing_under_any_clock(jumps in prop::collection::vec((-5_000i64..5_000, 1usize..3_000), 1..30)) {
            let word = AtomicU64::new(0);
            let mut rng = rng();
            let mut now = T0;
            let mut last = [0u8; 16];
            for (jump, count) in jumps {
                now = now.checked_add_signed(jump).unwrap();
                for _ in 0..count {
                    let id = next(&word, now, &mut rng);
                    prop_assert!(id > last);
                    prop_assert!(timestamp_ms(&id).unwrap() >= now.min(timestamp_ms(&last).unwrap_or(0)));
                    last = id;
                }
            }
        }

        #[test]
        fn boundary_is_the_smallest_of_its_millisecond(ms in 1..=MAX_UNIX_MS - 1, c: u64, r: u64) {
            prop_assert!(boundary(ms) <= compose(ms, c, r));
            prop_assert!(compose(ms - 1, c, r) < boundary(ms));
            prop_assert!(compose(ms, c, r) < boundary(ms + 1));
        }
    }

    #[test]
    fn the_counter_carries_into_the_next_millisecond_when_full() {
        // The word holds the next UUID: the last counter of T0.
        let word = AtomicU64::new((T0 << COUNTER_BITS) | COUNTER_MAX);
        let mut rng = rng();
        assert_eq!(timestamp_ms(&next(&word, T0, &mut rng)), Some(T0));
        let carried = next(&word, T0, &mut rng);
        assert_eq!(timestamp_ms(&carried), Some(T0 + 1));
    }

    #[test]
    fn a_new_millisecond_starts_the_counter_at_random_below_half() {
        let mut starts = std::collections::HashSet::new();
        let word = AtomicU64::new(0);
        let mut rng = rng();
        for i in 0..100 {
            let id = u128::from_be_bytes(next(&word, T0 + i, &mut rng));
            // the counter: the 12 bits of rand_a, then the first 10 of rand_b
            let counter = (((id >> 64) & 0xfff) << 10 | ((id >> RANDOM_BITS) & 0x3ff)) as u64;
            assert!(counter < COUNTER_START_LIMIT);
            starts.insert(counter);
        }
        assert!(
            starts.len() > 90,
            "counter starts should look random, got {} distinct",
            starts.len()
        );
    }

    #[test]
    fn v1_timestamps_decode() {
        // 1970-01-01 00:00:00 UTC as a v1 UUID: ticks = GREGORIAN_TO_UNIX_100NS.
        let t = GREGORIAN_TO_UNIX_100NS;
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&(t as u32).to_be_bytes());
        b[4..6].copy_from_slice(&((t >> 32) as u16).to_be_bytes());
        b[6..8].copy_from_slice(&(((t >> 48) as u16) | 0x1000).to_be_bytes());
        b[8] = 0x80;
        assert_eq!(v1_timestamp_us(&b), Some(0));
        assert_eq!(timestamp_ms(&b), None, "a v1 UUID is not a v7 one");
        let v4 = *uuid::Uuid::from_u128(0x1234_5678_9abc_4def_8123_4567_89ab_cdef).as_bytes();
        assert_eq!(v1_timestamp_us(&v4), None);
        assert_eq!(timestamp_ms(&v4), None);
    }

    #[test]
    fn each_process_gets_its_own_random_stream() {
        let mut shared = ForkSafeRng::new();
        let a: Vec<u64> = (0..4).map(|_| shared.get(100).next_u64()).collect();
        // Same object, as a forked child would inherit it, used under another pid.
        let b: Vec<u64> = (0..4).map(|_| shared.get(200).next_u64()).collect();
        assert_ne!(a, b);
        // Two fresh generators never start alike either.
        assert_ne!(
            ForkSafeRng::new().get(1).next_u64(),
            ForkSafeRng::new().get(1).next_u64()
        );
    }

    /// The counter of an id, as the layout places it: the 12 bits of rand_a, then the first 10
    /// of rand_b.
    fn counter_of(id: &[u8; 16]) -> u64 {
        let id = u128::from_be_bytes(*id);
        ((((id >> 64) & 0xfff) << 10) | ((id >> RANDOM_BITS) & 0x3ff)) as u64
    }

    /// Each millisecond the clock moves to is started at the clock's millisecond, never later,
    /// with a counter below 2^21 = 2,097,152 (the module's promise: at least 2^21 ids of room
    /// before a carry), and the starts spread over that range.
    #[test]
    fn each_millisecond_starts_at_the_clock_with_a_counter_below_2_pow_21() {
        let word = AtomicU64::new(0);
        let mut rng = rng();
        let mut high_half = 0;
        for i in 0..200 {
            let id = next(&word, T0 + i, &mut rng);
            assert_eq!(timestamp_ms(&id), Some(T0 + i), "id {i}");
            let counter = counter_of(&id);
            assert!(counter < 2_097_152, "id {i}: counter {counter}");
            high_half += u32::from(counter >= 1 << 20);
            // The word now holds this millisecond's next id: its counter counts on from there.
            let again = next(&word, T0 + i, &mut rng);
            assert_eq!(
                (timestamp_ms(&again), counter_of(&again)),
                (Some(T0 + i), counter + 1)
            );
        }
        assert!(
            (50..150).contains(&high_half),
            "{high_half} of 200 starts at or above 2^20"
        );
    }

    /// After 2109 (2^42 ms) the word has no room for more milliseconds: the UUIDs stay in its
    /// last millisecond and keep counting up there, still in order, instead of wrapping.
    #[test]
    fn past_42_bits_of_milliseconds_the_word_stays_in_its_last_one() {
        let last = (1u64 << 42) - 1;
        let word = AtomicU64::new(0);
        let mut rng = rng();
        let mut prev = [0u8; 16];
        for now in [last, last + 1, 1 << 43, MAX_UNIX_MS] {
            for _ in 0..500 {
                let id = next(&word, now, &mut rng);
                assert_eq!(timestamp_ms(&id), Some(last));
                assert!(id > prev);
                prev = id;
            }
        }
        // raise_past saturates the same way: a horizon past 2^42 ms still raises the word.
        let fresh = AtomicU64::new(0);
        raise_past(&fresh, MAX_UNIX_MS);
        assert_eq!(timestamp_ms(&next(&fresh, T0, &mut rng)), Some(last));
    }

    /// A UUID of any other variant than RFC 9562's (top bits of byte 8: 10) is neither a v7
    /// nor a v1 one, whatever its version nibble says.
    #[test]
    fn only_the_rfc_variant_has_a_timestamp() {
        let v7 = compose(T0, 1, 2);
        let mut v1 = [0u8; 16];
        v1[6] = 0x10;
        v1[8] = 0x80;
        assert!(is_rfc_variant(&v7) && is_rfc_variant(&v1));
        assert_eq!(timestamp_ms(&v7), Some(T0));
        assert!(v1_timestamp_us(&v1).is_some());
        // NCS (0x), Microsoft (110) and reserved (111)
        for top in [0x00u8, 0x40, 0xc0, 0xe0] {
            let (mut w7, mut w1) = (v7, v1);
            w7[8] = top | (v7[8] & 0x1f);
            w1[8] = top;
            assert!(!is_rfc_variant(&w7), "{top:#x}");
            assert_eq!(timestamp_ms(&w7), None, "{top:#x}");
            assert_eq!(v1_timestamp_us(&w1), None, "{top:#x}");
        }
    }

    /// Known version-1 UUIDs: RFC 9562's example (appendix A.1, 2022-02-22 14:22:22 -05:00),
    /// the first instant of the Gregorian calendar, 1.5 us after and before 1970, and the
    /// largest 60-bit count.
    #[test]
    fn v1_timestamps_decode_known_uuids() {
        let rfc = uuid::Uuid::parse_str("C232AB00-9414-11EC-B3C8-9F6BDECED846").unwrap();
        assert_eq!(v1_timestamp_us(rfc.as_bytes()), Some(1_645_557_742_000_000));
        let (secs, nanos) = rfc.get_timestamp().unwrap().to_unix();
        assert_eq!((secs, nanos), (1_645_557_742, 0), "the uuid crate agrees");
        let v1 = |ticks: u64| {
            *uuid::Builder::from_gregorian_timestamp(ticks, 0x1234, &[1, 2, 3, 4, 5, 6])
                .into_uuid()
                .as_bytes()
        };
        // 1582-10-15 00:00 UTC
        assert_eq!(v1_timestamp_us(&v1(0)), Some(-12_219_292_800_000_000));
        assert_eq!(v1_timestamp_us(&v1(GREGORIAN_TO_UNIX_100NS + 15)), Some(1));
        // before 1970 it rounds down, towards the past: 1.5 us before falls in microsecond -2
        assert_eq!(v1_timestamp_us(&v1(GREGORIAN_TO_UNIX_100NS - 15)), Some(-2));
        // the largest 60-bit count: every field of the timestamp in use
        let max = (1u64 << 60) - 1;
        assert_eq!(
            v1_timestamp_us(&v1(max)),
            Some(((max - GREGORIAN_TO_UNIX_100NS) / 10) as i64)
        );
    }

    #[test]
    fn at_makes_a_v7_uuid_of_the_given_time_with_fresh_random_bits() {
        let mut rng = rng();
        let a = at(T0, &mut rng);
        let b = at(T0, &mut rng);
        for id in [a, b] {
            assert_eq!(version(&id), 7);
            assert!(is_rfc_variant(&id));
            assert_eq!(timestamp_ms(&id), Some(T0));
        }
        assert_ne!(a, b, "the counter and random bits are drawn for each");
        assert_eq!(timestamp_ms(&at(MAX_UNIX_MS, &mut rng)), Some(MAX_UNIX_MS));
        assert_eq!(timestamp_ms(&at(0, &mut rng)), Some(0));
    }

    /// A random stream that, on its first draw, lets another caller act on the word: the
    /// moment in `next` between giving up an old millisecond's value and starting the clock's.
    struct Racing<'a> {
        word: &'a AtomicU64,
        other: Option<u64>,
        inner: ChaCha12Rng,
    }

    impl RngCore for Racing<'_> {
        fn next_u32(&mut self) -> u32 {
            self.next_u64() as u32
        }
        fn next_u64(&mut self) -> u64 {
            if let Some(value) = self.other.take() {
                self.word.store(value, Ordering::SeqCst);
            }
            self.inner.next_u64()
        }
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            self.inner.fill_bytes(dest)
        }
        fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
            self.inner.try_fill_bytes(dest)
        }
    }

    /// A caller whose value belongs to a millisecond that is over, and who finds that another
    /// caller has meanwhile started the clock's millisecond (and issued ids in it), joins that
    /// millisecond: it never starts it again at a counter of its own, which could move the
    /// word down and hand out the other caller's UUIDs a second time.
    #[test]
    fn a_millisecond_another_caller_began_is_joined_not_started_again() {
        let word = AtomicU64::new((T0 - 1) << COUNTER_BITS);
        // The other caller started T0 at counter 1,000 and has issued 1,000..=1,499.
        let mut racing = Racing {
            word: &word,
            other: Some((T0 << COUNTER_BITS) | 1_500),
            inner: rng(),
        };
        let id = next(&word, T0, &mut racing);
        assert_eq!((timestamp_ms(&id), counter_of(&id)), (Some(T0), 1_500));
        assert_eq!(word.load(Ordering::SeqCst), (T0 << COUNTER_BITS) | 1_501);
        // Likewise when the clock's millisecond was reached by the counter carrying into it.
        let word = AtomicU64::new(((T0 - 1) << COUNTER_BITS) | COUNTER_MAX);
        let mut rng = rng();
        let ids: Vec<_> = (0..3).map(|_| next(&word, T0, &mut rng)).collect();
        assert_eq!(timestamp_ms(&ids[0]), Some(T0));
        let counters: Vec<u64> = ids.iter().map(counter_of).collect();
        assert_eq!(counters, [0, 1, 2]);
    }

    /// A forked child inherits its parent's generator state: under a new pid it must draw a
    /// new seed, or parent and child would hand out the same "random" bits. Under the same pid
    /// the stream carries on (one seed per process, not a getrandom() per call).
    #[test]
    fn a_new_pid_reseeds_and_the_same_pid_keeps_its_stream() {
        let mut shared = ForkSafeRng::new();
        shared.get(100).next_u64();
        // What the parent draws next, from a copy of its state.
        let mut parent = shared.get(100).clone();
        let expected: Vec<u64> = (0..4).map(|_| parent.next_u64()).collect();
        let same_pid: Vec<u64> = (0..4).map(|_| shared.get(100).next_u64()).collect();
        assert_eq!(same_pid, expected, "no reseed while the pid is the same");
        let mut parent = shared.get(100).clone();
        let parent_next: Vec<u64> = (0..4).map(|_| parent.next_u64()).collect();
        let child: Vec<u64> = (0..4).map(|_| shared.get(200).next_u64()).collect();
        assert_ne!(child, parent_next, "the child drew its own seed");
    }

    /// More threads than cores on one word: one read-modify-write per UUID, which cannot fail;
    /// extra ones, and retries, only where a millisecond starts (at most a few per thread). The
    /// compare-and-swap loop before 0.3.0 made 1.8 RMWs per id in the snowflake's version of
    /// this test, most of them failed retries.
    #[test]
    fn contention_costs_one_rmw_per_uuid_and_retries_only_where_a_millisecond_changes() {
        const THREADS: u64 = 8;
        const PER_THREAD: u64 = 100_000;
        let word = AtomicU64::new(0);
        let results: Vec<(u64, u64, Vec<[u8; 16]>)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|seed| {
                    let word = &word;
                    s.spawn(move || {
                        let mut rng = ChaCha12Rng::seed_from_u64(seed);
                        crate::snowflake::probe::take();
                        let out: Vec<[u8; 16]> = (0..PER_THREAD)
                            .map(|_| {
                                let now = std::time::SystemTime::now()
                                    .duration_since(std::time::UNIX_EPOCH)
                                    .unwrap()
                                    .as_millis() as u64;
                                next(word, now, &mut rng)
                            })
                            .collect();
                        let (rmws, retries) = crate::snowflake::probe::take();
                        (rmws, retries, out)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let all: std::collections::HashSet<[u8; 16]> =
            results.iter().flat_map(|r| r.2.iter().copied()).collect();
        let n = THREADS * PER_THREAD;
        assert_eq!(all.len() as u64, n, "no duplicate");
        let millis: std::collections::HashSet<u64> =
            all.iter().map(|u| timestamp_ms(u).unwrap()).collect();
        let changes = millis.len() as u64;
        let (rmws, retries) = results.iter().fold((0, 0), |a, r| (a.0 + r.0, a.1 + r.1));
        eprintln!(
            "{THREADS} threads, {n} UUIDs over {changes} ms: {:.4} RMW per UUID, {retries} retries",
            rmws as f64 / n as f64
        );
        assert!(
            rmws - n <= 3 * THREADS * changes,
            "{} extra RMWs for {changes} ms",
            rmws - n
        );
        assert!(
            retries <= THREADS * changes,
            "{retries} retries for {changes} ms"
        );
    }

    #[test]
    fn threads_sharing_a_word_never_collide() {
        let word = AtomicU64::new(0);
        let all: Vec<[u8; 16]> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|seed| {
                    let word = &word;
                    s.spawn(move || {
                        let mut rng = ChaCha12Rng::seed_from_u64(seed);
                        let mut out = Vec::with_capacity(50_000);
                        for _ in 0..50_000 {
                            let now = std::time::SystemTime::now()
                                .duration_since(std::time::UNIX_EPOCH)
                                .unwrap()
                                .as_millis() as u64;
                            out.push(next(word, now, &mut rng));
                        }
                        assert!(out.windows(2).all(|w| w[0] < w[1]));
                        out
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap())
                .collect()
        });
        let distinct: std::collections::HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), all.len());
    }
}
