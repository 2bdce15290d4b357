//! Snowflake layouts: how a fleet splits an id's 63 usable bits between time, worker id and
//! sequence, and how long one unit of time is.
//!
//! ```text
//!  worker above sequence (Twitter, Instagram, Discord, js53, an explicit split):
//!   63 | time since the epoch, in units | worker id | sequence
//!  sequence above worker (Sonyflake):
//!   63 | time since the epoch, in units | sequence  | worker id
//! ```
//!
//! Bit 63 is always 0: ids are positive bigints. Where the three fields add up to 64 bits, as
//! Instagram's 41/13/10 and Discord's 42/10/12 do, the time field's top bit is bigint's sign bit,
//! which no id sets: the time field lasts 2^40 units (Instagram: 34.8 years) or 2^41 (Discord:
//! 69.7) from its epoch. Within a worker, ids taken in the order they are issued increase under
//! either order, because the worker field is constant and the sequence is the lower-order part of
//! `(time, sequence)`. Discord's worker field (5 bits of worker, 5 of process) is one 10-bit id.

use std::fmt;

/// Which of the two lower fields sits above the other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Order {
    /// time | worker | sequence: Twitter's, and every layout here but Sonyflake's.
    WorkerAbove,
    /// time | sequence | worker: Sonyflake's.
    SequenceAbove,
}

/// A bit split and a time unit. Built only through [`Layout::named`], [`Layout::parse`] or
/// [`Layout::new`], which check that it fits: the fields are then always in range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    time_bits: u32,
    worker_bits: u32,
    sequence_bits: u32,
    unit_ms: u64,
    order: Order,
}

/// The time units a layout may count in, ms. A unit of a second or less keeps the horizon (Unix
/// ms, pushed 1 s ahead) meaningful; these are the ones peers use (1 ms: Twitter; 10 ms:
/// Sonyflake; 1 s: Baidu's uid-generator).
pub const UNITS_MS: [u64; 4] = [1, 10, 100, 1000];
/// The fewest years a layout's time field must last from its epoch: a split that runs out
/// sooner is a typo, not a choice.
pub const MIN_LIFETIME_YEARS: u64 = 10;
/// The widest worker field: 65,536 workers (Sonyflake's 16 bits). The registry's table holds
/// any of them.
pub const MAX_WORKER_BITS: u32 = 16;
const MS_PER_YEAR: u64 = 31_556_952_000; // 365.2425 days

/// The layouts by name, in the order the docs list them.
pub const NAMED: [(&str, Layout); 5] = [
    ("twitter", Layout::TWITTER),
    ("instagram", Layout::INSTAGRAM),
    ("discord", Layout::DISCORD),
    ("sonyflake", Layout::SONYFLAKE),
    ("js53", Layout::JS53),
];

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayoutError {
    /// Not a name, and not `time/worker/sequence[/unit]`.
    Unparsable(String),
    /// More than 64 bits, or a field of 0 bits.
    DoesNotFit {
        time_bits: u32,
        worker_bits: u32,
        sequence_bits: u32,
    },
    WorkerTooWide(u32),
    UnitNotAllowed(u64),
    TooShortLived {
        years: u64,
    },
    /// A field's value does not fit its bits.
    TimeOutOfRange(u64, u64),
    WorkerOutOfRange(u64, u64),
    SequenceOutOfRange(u64, u64),
    NegativeId(i64),
}

impl fmt::Display for LayoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Unparsable(text) => write!(f, "\"{text}\" is not a snowflake layout"),
            Self::DoesNotFit {
                time_bits,
                worker_bits,
                sequence_bits,
            } => write!(
                f,
                "{time_bits}/{worker_bits}/{sequence_bits} does not fit a bigint: the three fields \
                 need at least 1 bit each and at most 64 together (the time field's top bit is then \
                 the sign bit, which no id sets)"
            ),
            Self::WorkerTooWide(bits) => write!(
                f,
                "a worker field of {bits} bits is wider than the {MAX_WORKER_BITS} allowed"
            ),
            Self::UnitNotAllowed(unit) => write!(
                f,
                "a time unit of {unit} ms is not allowed: use 1, 10, 100 or 1000 ms"
            ),
            Self::TooShortLived { years } => write!(
                f,
                "its time field runs out {years} years after the epoch, fewer than the \
                 {MIN_LIFETIME_YEARS} allowed: give it more time bits or a longer unit"
            ),
            Self::TimeOutOfRange(v, max) => {
                write!(f, "time {v} does not fit the layout's time field (at most {max})")
            }
            Self::WorkerOutOfRange(v, max) => {
                write!(f, "worker id {v} is out of range 0..{max}")
            }
            Self::SequenceOutOfRange(v, max) => {
                write!(f, "sequence {v} is out of range 0..{max}")
            }
            Self::NegativeId(id) => {
                write!(f, "snowflake id {id} is negative: bit 63 is always 0")
            }
        }
    }
}

/// What a layout's text may have around it and its parts: ASCII space, tab, newline, carriage
/// return, vertical tab and form feed (SQL's `E' \t\n\r\013\014'`), not Unicode's other blanks.
pub const BLANKS: &[char] = &[' ', '\t', '\n', '\r', '\x0B', '\x0C'];

/// An id's three fields, the time in the layout's units since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fields {
    pub time: u64,
    pub worker: u64,
    pub sequence: u64,
}

impl Layout {
    /// 41 bits of ms, 10 of worker, 12 of sequence: idgen's layout since 0.1.0.
    pub const TWITTER: Layout = Layout::fixed(41, 10, 12, 1, Order::WorkerAbove);
    /// Instagram's `next_id()`: 41 bits of ms (40 usable: the 41st is the sign bit), 13 of shard
    /// id, 10 of sequence.
    pub const INSTAGRAM: Layout = Layout::fixed(41, 13, 10, 1, Order::WorkerAbove);
    /// Discord's: 42 bits of ms documented, 41 usable in a positive bigint, 5 + 5 of worker and
    /// process, 12 of increment.
    pub const DISCORD: Layout = Layout::fixed(42, 10, 12, 1, Order::WorkerAbove);
    /// Sonyflake's: 39 bits of 10-ms units, 8 of sequence above 16 of machine id.
    pub const SONYFLAKE: Layout = Layout::fixed(39, 16, 8, 10, Order::SequenceAbove);
    /// Every id at most 2^53 - 1, a JavaScript number that is exact: 38 bits of 10-ms units
    /// (87 years), 7 of worker (128), 8 of sequence (25,600 ids a second per worker).
    pub const JS53: Layout = Layout::fixed(38, 7, 8, 10, Order::WorkerAbove);

    const fn fixed(t: u32, w: u32, s: u32, unit_ms: u64, order: Order) -> Layout {
        Layout {
            time_bits: t,
            worker_bits: w,
            sequence_bits: s,
            unit_ms,
            order,
        }
    }

    /// An explicit split, worker above sequence, checked.
    pub fn new(
        time_bits: u32,
        worker_bits: u32,
        sequence_bits: u32,
        unit_ms: u64,
    ) -> Result<Layout, LayoutError> {
        Layout::fixed(
            time_bits,
            worker_bits,
            sequence_bits,
            unit_ms,
            Order::WorkerAbove,
        )
        .checked()
    }

    fn checked(self) -> Result<Layout, LayoutError> {
        let (t, w, s) = (self.time_bits, self.worker_bits, self.sequence_bits);
        // Summed in u64: three u32 fields from a setting could wrap a u32 sum past the check.
        if t == 0 || w == 0 || s == 0 || u64::from(t) + u64::from(w) + u64::from(s) > 64 {
            return Err(LayoutError::DoesNotFit {
                time_bits: t,
                worker_bits: w,
                sequence_bits: s,
            });
        }
        if w > MAX_WORKER_BITS {
            return Err(LayoutError::WorkerTooWide(w));
        }
        if !UNITS_MS.contains(&self.unit_ms) {
            return Err(LayoutError::UnitNotAllowed(self.unit_ms));
        }
        let years = self.lifetime_ms() / MS_PER_YEAR;
        if years < MIN_LIFETIME_YEARS {
            return Err(LayoutError::TooShortLived { years });
        }
        Ok(self)
    }

    /// A name, or `time/worker/sequence` bits with an optional unit (`/10` or `/10ms`; 1 ms if
    /// none), worker above sequence. Blanks (`BLANKS`) around the whole and around each part,
    /// and the case of ASCII letters, are ignored; nothing else is. The portable edition's
    /// `idgen_portable_layout()` and the registry's installer read a layout by the same rule
    /// (pg_test/test_portable.py checks the two agree over generated strings).
    pub fn parse(text: &str) -> Result<Layout, LayoutError> {
        let t = text.trim_matches(BLANKS).to_ascii_lowercase();
        if let Some(layout) = Layout::named(&t) {
            return Ok(layout);
        }
        let unparsable = || LayoutError::Unparsable(text.trim_matches(BLANKS).to_string());
        let parts: Vec<&str> = t.split('/').map(|p| p.trim_matches(BLANKS)).collect();
        if !(3..=4).contains(&parts.len()) {
            return Err(unparsable());
        }
        let bits = |p: &str| p.parse::<u32>().map_err(|_| unparsable());
        let unit = match parts.get(3) {
            None => 1,
            Some(u) => u
                .strip_suffix("ms")
                .unwrap_or(u)
                .trim_matches(BLANKS)
                .parse::<u64>()
                .map_err(|_| unparsable())?,
        };
        Layout::new(bits(parts[0])?, bits(parts[1])?, bits(parts[2])?, unit)
    }

    pub fn named(name: &str) -> Option<Layout> {
        NAMED.iter().find(|(n, _)| *n == name).map(|(_, l)| *l)
    }

    /// The name a named layout goes by, or None for an explicit one.
    pub fn name(&self) -> Option<&'static str> {
        NAMED.iter().find(|(_, l)| l == self).map(|(n, _)| *n)
    }

    pub fn time_bits(&self) -> u32 {
        self.time_bits
    }
    pub fn worker_bits(&self) -> u32 {
        self.worker_bits
    }
    pub fn sequence_bits(&self) -> u32 {
        self.sequence_bits
    }
    pub fn unit_ms(&self) -> u64 {
        self.unit_ms
    }
    pub fn order(&self) -> Order {
        self.order
    }
    /// The time field's bits that an id can set: all of them, but the sign bit where the three
    /// fields fill 64 bits.
    /// Whether every id reads the same under both: the same worker and sequence fields, unit
    /// and order, and the same usable time bits (Discord's declared 42nd bit is the sign bit,
    /// so its ids are Twitter's).
    pub fn same_ids(&self, other: &Layout) -> bool {
        (
            self.usable_time_bits(),
            self.worker_bits,
            self.sequence_bits,
            self.unit_ms,
            self.order,
        ) == (
            other.usable_time_bits(),
            other.worker_bits,
            other.sequence_bits,
            other.unit_ms,
            other.order,
        )
    }

    pub fn usable_time_bits(&self) -> u32 {
        self.time_bits
            .min(63 - self.worker_bits - self.sequence_bits)
    }
    pub fn max_time(&self) -> u64 {
        (1 << self.usable_time_bits()) - 1
    }
    pub fn max_worker(&self) -> u64 {
        (1 << self.worker_bits) - 1
    }
    pub fn max_sequence(&self) -> u64 {
        (1 << self.sequence_bits) - 1
    }
    /// How long the time field lasts from the epoch, ms.
    pub fn lifetime_ms(&self) -> u64 {
        // Saturates: 2^55 ticks of a second pass u64's ms (and any timestamp's range).
        (self.max_time() + 1).saturating_mul(self.unit_ms)
    }
    /// The most ids one worker can issue in a second.
    pub fn ids_per_second(&self) -> u64 {
        (self.max_sequence() + 1) * (1000 / self.unit_ms)
    }
    /// The largest id the layout can make.
    pub fn max_id(&self) -> i64 {
        ((1u64 << (self.usable_time_bits() + self.worker_bits + self.sequence_bits)) - 1) as i64
    }

    fn shifts(&self) -> (u32, u32) {
        // (worker shift, sequence shift)
        match self.order {
            Order::WorkerAbove => (self.sequence_bits, 0),
            Order::SequenceAbove => (0, self.worker_bits),
        }
    }

    pub fn compose(&self, f: Fields) -> Result<i64, LayoutError> {
        if f.time > self.max_time() {
            return Err(LayoutError::TimeOutOfRange(f.time, self.max_time()));
        }
        if f.worker > self.max_worker() {
            return Err(LayoutError::WorkerOutOfRange(f.worker, self.max_worker()));
        }
        if f.sequence > self.max_sequence() {
            return Err(LayoutError::SequenceOutOfRange(
                f.sequence,
                self.max_sequence(),
            ));
        }
        let (ws, ss) = self.shifts();
        let time_shift = self.worker_bits + self.sequence_bits;
        Ok(((f.time << time_shift) | (f.worker << ws) | (f.sequence << ss)) as i64)
    }

    /// The fields of any positive id: bits above the layout's width (an id made under a wider
    /// layout) land in the time field, which then exceeds `max_time`.
    pub fn decompose(&self, id: i64) -> Result<Fields, LayoutError> {
        if id < 0 {
            return Err(LayoutError::NegativeId(id));
        }
        let id = id as u64;
        let (ws, ss) = self.shifts();
        Ok(Fields {
            time: id >> (self.worker_bits + self.sequence_bits),
            worker: (id >> ws) & self.max_worker(),
            sequence: (id >> ss) & self.max_sequence(),
        })
    }

    /// The smallest id whose time is `time` units (worker 0, sequence 0).
    pub fn lowest_id_at(&self, time: u64) -> Result<i64, LayoutError> {
        self.compose(Fields {
            time,
            worker: 0,
            sequence: 0,
        })
    }

    /// The layout as four bytes (time, worker and sequence bits; unit and order), for the
    /// horizon's file and WAL record, which must say which layout their ids were made under.
    pub fn to_code(&self) -> u32 {
        let unit = UNITS_MS
            .iter()
            .position(|u| *u == self.unit_ms)
            .unwrap_or(0) as u32;
        let order = match self.order {
            Order::WorkerAbove => 0,
            Order::SequenceAbove => 1,
        };
        self.time_bits << 24 | self.worker_bits << 16 | self.sequence_bits << 8 | unit << 1 | order
    }

    pub fn from_code(code: u32) -> Option<Layout> {
        let unit = *UNITS_MS.get(((code >> 1) & 0x7f) as usize)?;
        let order = if code & 1 == 1 {
            Order::SequenceAbove
        } else {
            Order::WorkerAbove
        };
        let layout = Layout::fixed(
            code >> 24,
            (code >> 16) & 0xff,
            (code >> 8) & 0xff,
            unit,
            order,
        );
        layout.checked().ok().filter(|l| l.to_code() == code)
    }
}

impl fmt::Display for Layout {
    /// A named layout's name, else the explicit form `parse` reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(
                f,
                "{}/{}/{}/{}ms",
                self.time_bits, self.worker_bits, self.sequence_bits, self.unit_ms
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_named_layouts_have_their_systems_splits_and_units() {
        let split = |l: Layout| (l.time_bits, l.worker_bits, l.sequence_bits, l.unit_ms);
        assert_eq!(split(Layout::TWITTER), (41, 10, 12, 1));
        assert_eq!(split(Layout::INSTAGRAM), (41, 13, 10, 1));
        assert_eq!(split(Layout::DISCORD), (42, 10, 12, 1));
        assert_eq!(split(Layout::SONYFLAKE), (39, 16, 8, 10));
        assert_eq!(Layout::SONYFLAKE.order(), Order::SequenceAbove);
        assert_eq!(split(Layout::JS53), (38, 7, 8, 10));
        for (name, layout) in NAMED {
            assert_eq!(layout.checked(), Ok(layout), "{name}");
            assert_eq!(Layout::parse(name), Ok(layout));
        }
    }

    #[test]
    fn a_js53_id_is_an_exact_javascript_number_for_its_whole_lifetime() {
        let js = Layout::JS53;
        assert_eq!(js.max_id(), (1i64 << 53) - 1);
        let last = js
            .compose(Fields {
                time: js.max_time(),
                worker: js.max_worker(),
                sequence: js.max_sequence(),
            })
            .unwrap();
        assert_eq!(last, js.max_id());
        // 2^53 - 1 survives a round trip through an f64, JavaScript's only number
        assert_eq!(last as f64 as i64, last);
        assert_eq!(js.lifetime_ms() / MS_PER_YEAR, 87);
        assert_eq!((js.max_worker() + 1, js.ids_per_second()), (128, 25_600));
    }

    #[test]
    fn each_named_layout_lasts_as_long_as_its_system_says() {
        let years = |l: Layout| l.lifetime_ms() / MS_PER_YEAR;
        assert_eq!(years(Layout::TWITTER), 69);
        assert_eq!(
            years(Layout::DISCORD),
            69,
            "its 42nd time bit is the sign bit"
        );
        assert_eq!(
            years(Layout::INSTAGRAM),
            34,
            "its 41st time bit is the sign bit"
        );
        assert_eq!(Layout::INSTAGRAM.max_id(), i64::MAX);
        assert_eq!(Layout::DISCORD.max_id(), i64::MAX);
        assert_eq!(years(Layout::SONYFLAKE), 174);
        assert_eq!(Layout::TWITTER.ids_per_second(), 4_096_000);
        assert_eq!(Layout::INSTAGRAM.ids_per_second(), 1_024_000);
        assert_eq!(Layout::SONYFLAKE.ids_per_second(), 25_600);
    }

    #[test]
    fn the_twitter_layout_places_its_fields_where_idgen_always_has() {
        // time << 22 | worker << 12 | sequence: the ids of 0.1.0 and 0.2.0
        let f = Fields {
            time: 123_456_789,
            worker: 513,
            sequence: 4_000,
        };
        let id = Layout::TWITTER.compose(f).unwrap();
        assert_eq!(id, (123_456_789 << 22) | (513 << 12) | 4_000);
        assert_eq!(Layout::TWITTER.decompose(id), Ok(f));
    }

    #[test]
    fn sonyflake_puts_the_sequence_above_the_machine_id() {
        // Sonyflake: time << 24 | sequence << 16 | machine
        let f = Fields {
            time: 1_000,
            worker: 0xBEEF,
            sequence: 0x42,
        };
        let id = Layout::SONYFLAKE.compose(f).unwrap();
        assert_eq!(id, (1_000 << 24) | (0x42 << 16) | 0xBEEF);
        assert_eq!(Layout::SONYFLAKE.decompose(id), Ok(f));
    }

    #[test]
    fn an_instagram_id_decodes_as_instagrams_formula_made_it() {
        // next_id(): (now_millis - epoch) << 23 | shard_id << 10 | (seq_id % 1024)
        let id: i64 = (987_654_321 << 23) | (5_000 << 10) | 1_023;
        assert!(Layout::INSTAGRAM.decompose(id).unwrap().time <= Layout::INSTAGRAM.max_time());
        let f = Layout::INSTAGRAM.decompose(id).unwrap();
        assert_eq!((f.time, f.worker, f.sequence), (987_654_321, 5_000, 1_023));
    }

    #[test]
    fn explicit_splits_parse_print_and_parse_back() {
        let l = Layout::parse(" 40/12/11/10ms ").unwrap();
        assert_eq!(
            (
                l.time_bits(),
                l.worker_bits(),
                l.sequence_bits(),
                l.unit_ms()
            ),
            (40, 12, 11, 10)
        );
        assert_eq!(l.to_string(), "40/12/11/10ms");
        assert_eq!(Layout::parse(&l.to_string()), Ok(l));
        assert_eq!(Layout::parse("41/10/12"), Ok(Layout::TWITTER));
        assert_eq!(Layout::parse("41/10/12/1"), Ok(Layout::TWITTER));
        assert_eq!(Layout::parse("TWITTER"), Ok(Layout::TWITTER));
        assert_eq!(Layout::TWITTER.to_string(), "twitter");
        assert_eq!(Layout::parse("42/10/12"), Ok(Layout::DISCORD));
        assert_eq!(Layout::DISCORD.to_string(), "discord");
    }

    #[test]
    fn splits_that_do_not_fit_and_units_not_allowed_are_refused_saying_why() {
        let err = |t: &str| Layout::parse(t).unwrap_err().to_string();
        assert!(err("42/11/12").contains("does not fit a bigint"));
        assert!(err("41/0/22").contains("at least 1 bit each"));
        assert!(err("30/17/16").contains("wider than the 16 allowed"));
        assert!(err("41/10/12/7").contains("7 ms is not allowed: use 1, 10, 100 or 1000 ms"));
        assert!(err("35/10/12").contains("runs out 1 years after the epoch"));
        assert!(err("snowflake").contains("is not a snowflake layout"));
        assert_eq!(err("41/10"), "\"41/10\" is not a snowflake layout");
        assert!(err("41/10/x").contains("not a snowflake layout"));
        // the shortest-lived split allowed: 39 bits of ms are 17 years
        assert!(Layout::parse("39/12/12").is_ok());
        assert!(Layout::parse("38/12/13").is_err());
        // exactly at the bound: 2^35 ticks of 10 ms are 10.9 years (10 whole ones), allowed;
        // a bit fewer is 5
        assert_eq!(
            Layout::parse("35/10/12/10ms").unwrap().lifetime_ms() / MS_PER_YEAR,
            MIN_LIFETIME_YEARS
        );
        assert!(err("34/10/12/10ms").contains("runs out 5 years after the epoch"));
        // the longest-lived splits: more ms than a u64 holds, not a wrapped product
        assert_eq!(
            Layout::parse("61/1/1/1000").unwrap().lifetime_ms(),
            u64::MAX
        );
        assert!(Layout::parse("55/4/4/1000ms").is_ok());
        // fields whose u32 sum wraps to a small number still do not fit
        assert!(err("4294967295/1/1").contains("does not fit a bigint"));
        assert!(err("2147483648/2147483648/1").contains("does not fit a bigint"));
    }

    #[test]
    fn fields_out_of_range_are_refused_naming_the_bound() {
        let l = Layout::INSTAGRAM;
        let f = |time, worker, sequence| Fields {
            time,
            worker,
            sequence,
        };
        assert_eq!(
            l.compose(f(1 << 40, 0, 0)),
            Err(LayoutError::TimeOutOfRange(1 << 40, (1 << 40) - 1)),
            "its 41st time bit is the sign bit"
        );
        assert_eq!(
            l.compose(f(0, 8192, 0)),
            Err(LayoutError::WorkerOutOfRange(8192, 8191))
        );
        assert_eq!(
            l.compose(f(0, 0, 1024)),
            Err(LayoutError::SequenceOutOfRange(1024, 1023))
        );
        assert_eq!(
            LayoutError::WorkerOutOfRange(8192, 8191).to_string(),
            "worker id 8192 is out of range 0..8191"
        );
        assert_eq!(l.decompose(-5), Err(LayoutError::NegativeId(-5)));
        assert_eq!(l.decompose(-1), Err(LayoutError::NegativeId(-1)));
        assert_eq!(
            l.decompose(i64::MIN),
            Err(LayoutError::NegativeId(i64::MIN))
        );
        // 0 is an id (the epoch's first tick, worker 0, sequence 0), not a negative one
        assert_eq!(
            l.decompose(0),
            Ok(Fields {
                time: 0,
                worker: 0,
                sequence: 0
            })
        );
        assert_eq!(l.lowest_id_at(3), Ok(3 << 23));
    }

    #[test]
    fn a_layouts_code_names_it_exactly() {
        for (_, l) in NAMED {
            assert_eq!(Layout::from_code(l.to_code()), Some(l));
        }
        assert_ne!(Layout::TWITTER.to_code(), Layout::INSTAGRAM.to_code());
        assert_eq!(Layout::TWITTER.to_code(), 41 << 24 | 10 << 16 | 12 << 8);
        assert_eq!(Layout::from_code(0), None, "a zero code is no layout");
        assert_eq!(
            Layout::from_code(42 << 24 | 11 << 16 | 12 << 8),
            None,
            "65 bits"
        );
        assert_eq!(
            Layout::from_code(41 << 24 | 10 << 16 | 12 << 8 | 9 << 1),
            None,
            "no such unit"
        );
    }

    /// A named layout, or any explicit split that fits (explicit ones are worker above sequence).
    fn any_layout() -> impl Strategy<Value = Layout> {
        let named = (0..NAMED.len()).prop_map(|i| NAMED[i].1);
        let explicit = (1u32..=16, 1u32..=22, 20u32..=48, 0usize..4)
            .prop_filter_map("a split that fits", |(w, s, t, u)| {
                Layout::new(t, w, s, UNITS_MS[u]).ok()
            });
        prop_oneof![named, explicit]
    }

    proptest! {
        #[test]
        fn every_layout_round_trips_its_fields_and_code(
            l in any_layout(), t in any::<u64>(), w in any::<u64>(), s in any::<u64>(),
        ) {
            let f = Fields { time: t % (l.max_time() + 1), worker: w % (l.max_worker() + 1),
                             sequence: s % (l.max_sequence() + 1) };
            let id = l.compose(f).unwrap();
            prop_assert!(id >= 0 && id <= l.max_id());
            prop_assert_eq!(l.decompose(id), Ok(f));
            prop_assert_eq!(Layout::from_code(l.to_code()), Some(l));
            prop_assert_eq!(Layout::parse(&l.to_string()), Ok(l));
        }

        #[test]
        fn within_a_worker_ids_order_as_their_time_and_sequence_do(
            l in any_layout(), a in any::<(u64, u64)>(), b in any::<(u64, u64)>(), w in any::<u64>(),
        ) {
            let worker = w % (l.max_worker() + 1);
            let f = |(t, s): (u64, u64)| Fields { time: t % (l.max_time() + 1), worker,
                                                  sequence: s % (l.max_sequence() + 1) };
            let (fa, fb) = (f(a), f(b));
            let (ia, ib) = (l.compose(fa).unwrap(), l.compose(fb).unwrap());
            prop_assert_eq!(ia.cmp(&ib), (fa.time, fa.sequence).cmp(&(fb.time, fb.sequence)));
        }

        #[test]
        fn a_later_time_unit_always_makes_a_larger_id_whatever_the_worker(
            l in any_layout(), t in any::<u64>(), w in any::<(u64, u64)>(), s in any::<(u64, u64)>(),
        ) {
            let t = t % l.max_time();
            let id = |time, w: u64, s: u64| l.compose(Fields { time, worker: w % (l.max_worker() + 1),
                                                              sequence: s % (l.max_sequence() + 1) }).unwrap();
            prop_assert!(id(t, w.0, s.0) < id(t + 1, w.1, s.1));
        }
    }
}
