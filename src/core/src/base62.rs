//! Base62 codes: encode/decode over any 62-character ASCII alphabet, fixed widths that sort, and
//! a keyed permutation that hides how many records exist.
//!
//! Pure Rust: no Postgres in here.
//!
//! Ordering: with an alphabet in ASCII order (the default, `0-9A-Za-z`) and a fixed width, codes
//! compare byte by byte exactly as their numbers do, which is what `COLLATE "C"` does. Unpadded,
//! "z" (61) sorts after "10" (62); under a linguistic collation "a" sorts next to "A", so
//! neither keeps numeric order.

use siphasher::sip::SipHasher24;
use std::hash::Hasher;

/// The default alphabet: digits, upper case, lower case — ASCII order.
pub const DEFAULT_ALPHABET: &str = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// Digits needed for any non-negative bigint (62^11 > 2^63).
pub const BIGINT_WIDTH: usize = 11;
/// Digits needed for any 128-bit value, such as a UUID (62^22 > 2^128).
pub const UUID_WIDTH: usize = 22;
/// Widths beyond this are refused: longer codes only add padding.
pub const MAX_WIDTH: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The alphabet is not 62 distinct ASCII characters.
    BadAlphabet(String),
    Negative(i64),
    BadWidth(i64),
    /// The value needs more digits than the fixed width allows.
    TooWide {
        digits: usize,
        width: usize,
    },
    Empty,
    BadCharacter {
        character: char,
        position: usize,
    },
    /// The code's value does not fit the target type.
    Overflow,
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::BadAlphabet(why) => write!(f, "invalid base62 alphabet: {why}"),
            Error::Negative(n) => write!(f, "cannot base62-encode a negative number ({n})"),
            Error::BadWidth(w) => write!(f, "base62 width {w} is out of range 0..{MAX_WIDTH}"),
            Error::TooWide { digits, width } => {
                write!(
                    f,
                    "the value needs {digits} base62 digits, more than width {width}"
                )
            }
            Error::Empty => write!(f, "cannot decode an empty base62 code"),
            Error::BadCharacter {
                character,
                position,
            } => {
                write!(
                    f,
                    "invalid base62 character {character:?} at position {position}"
                )
            }
            Error::Overflow => write!(f, "base62 code is out of range for the result type"),
        }
    }
}

/// A validated alphabet with its reverse table.
#[derive(Debug, Clone)]
pub struct Alphabet {
    digits: [u8; 62],
    values: [u8; 128],
}

const NONE: u8 = u8::MAX;

impl Alphabet {
    /// Validates without copying `text` anywhere: the length is checked first, so a huge
    /// argument costs one comparison.
    pub fn new(text: &[u8]) -> Result<Alphabet, Error> {
        let bytes = text;
        if bytes.len() != 62 {
            return Err(Error::BadAlphabet(format!(
                "it has {} bytes, not 62",
                bytes.len()
            )));
        }
        if !text.is_ascii() {
            return Err(Error::BadAlphabet("it must be ASCII".into()));
        }
        let mut digits = [0u8; 62];
        let mut values = [NONE; 128];
        for (i, &b) in bytes.iter().enumerate() {
            if values[b as usize] != NONE {
                return Err(Error::BadAlphabet(format!("{:?} appears twice", b as char)));
            }
            if b.is_ascii_control() {
                return Err(Error::BadAlphabet("it contains a control character".into()));
            }
            values[b as usize] = i as u8;
            digits[i] = b;
        }
        Ok(Alphabet { digits, values })
    }

    pub fn default_alphabet() -> &'static Alphabet {
        static DEFAULT: std::sync::OnceLock<Alphabet> = std::sync::OnceLock::new();
        DEFAULT.get_or_init(|| Alphabet::new(DEFAULT_ALPHABET.as_bytes()).expect("valid"))
    }

    /// The 62 characters, in digit order.
    pub fn as_bytes(&self) -> &[u8] {
        &self.digits
    }

    fn value_of(&self, byte: u8) -> Option<u64> {
        match self.values.get(byte as usize) {
            Some(&v) if v != NONE => Some(u64::from(v)),
            _ => None,
        }
    }
}

fn check_width(width: i64) -> Result<usize, Error> {
    usize::try_from(width)
        .ok()
        .filter(|&w| w <= MAX_WIDTH)
        .ok_or(Error::BadWidth(width))
}

/// A 128-bit value (a UUID) as a code padded with the alphabet's zero digit to `width` (see
/// `padded_len`).
pub fn encode_u128(mut n: u128, width: i64, alphabet: &Alphabet) -> Result<String, Error> {
    let mut buf = [0u8; UUID_WIDTH];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = alphabet.digits[(n % 62) as usize];
        n /= 62;
        if n == 0 {
            return padded_string(&buf[i..], width, alphabet);
        }
    }
}

/// 62^1 .. 62^10: a bigint of `d` digits is below `POW62[d - 1]` (62^11 exceeds every u64).
const POW62: [u64; BIGINT_WIDTH - 1] = {
    let mut p = [0u64; BIGINT_WIDTH - 1];
    let mut i = 0;
    let mut v: u64 = 62;
    while i < p.len() {
        p[i] = v;
        v = v.wrapping_mul(62);
        i += 1;
    }
    p
};

/// The number of base62 digits of `n` (1 for 0).
fn digit_count(n: u64) -> usize {
    1 + POW62.iter().take_while(|&&p| n >= p).count()
}

/// The length of the code of `n` at `width` (see `padded_len`), checked before anything is
/// written: the SQL function sizes its result with this, then fills it with `write_code`.
pub fn code_len(n: i64, width: i64) -> Result<usize, Error> {
    let n = u64::try_from(n).map_err(|_| Error::Negative(n))?;
    padded_len(digit_count(n), width)
}

/// Writes the code of `n` into `out`, right-aligned and padded on the left with the alphabet's
/// zero digit. `out.len()` must be `code_len(n, width)` for some width (at least the digit
/// count); a shorter `out` panics. Divides in u64 (u128 division is a library call, several
/// times slower), by 62² per step: the two digits of each step come from its remainder apart
/// from the chain of divisions, which is half as long as dividing by 62.
pub fn write_code(n: u64, alphabet: &Alphabet, out: &mut [u8]) {
    const SQUARE: u64 = 62 * 62;
    let d = &alphabet.digits;
    let mut n = n;
    let mut i = out.len();
    while n >= SQUARE {
        let r = (n % SQUARE) as usize;
        n /= SQUARE;
        out[i - 1] = d[r % 62];
        out[i - 2] = d[r / 62];
        i -= 2;
    }
    let n = n as usize;
    if n >= 62 {
        out[i - 1] = d[n % 62];
        out[i - 2] = d[n / 62];
        i -= 2;
    } else {
        out[i - 1] = d[n];
        i -= 1;
    }
    out[..i].fill(d[0]);
}

fn padded_string(digits: &[u8], width: i64, alphabet: &Alphabet) -> Result<String, Error> {
    let mut out = vec![alphabet.digits[0]; padded_len(digits.len(), width)?];
    let pad = out.len() - digits.len();
    out[pad..].copy_from_slice(digits);
    Ok(String::from_utf8(out).expect("alphabets are ASCII"))
}

/// The length of a code of `digits` digits at `width`: 0 means as many as needed; any other
/// width is exact, and a value too large for it is an error rather than a longer code that
/// would break the ordering.
pub fn padded_len(digits: usize, width: i64) -> Result<usize, Error> {
    match check_width(width)? {
        0 => Ok(digits),
        w if digits > w => Err(Error::TooWide { digits, width: w }),
        w => Ok(w),
    }
}

/// A non-negative bigint as a code; see `padded_len` for `width`. The same two steps as the
/// SQL function: `code_len`, then `write_code`.
pub fn encode(n: i64, width: i64, alphabet: &Alphabet) -> Result<String, Error> {
    let mut out = vec![0u8; code_len(n, width)?];
    write_code(n as u64, alphabet, &mut out);
    Ok(String::from_utf8(out).expect("alphabets are ASCII"))
}

pub fn decode_u128(code: &str, alphabet: &Alphabet) -> Result<u128, Error> {
    if code.is_empty() {
        return Err(Error::Empty);
    }
    let mut n: u128 = 0;
    for (position, ch) in code.chars().enumerate() {
        let digit = u8::try_from(ch)
            .ok()
            .and_then(|b| alphabet.value_of(b))
            .ok_or(Error::BadCharacter {
                character: ch,
                position: position + 1,
            })?;
        n = n
            .checked_mul(62)
            .and_then(|n| n.checked_add(u128::from(digit)))
            .ok_or(Error::Overflow)?;
    }
    Ok(n)
}

/// Decodes to a non-negative bigint; leading zero digits (padding) are allowed.
pub fn decode(code: &str, alphabet: &Alphabet) -> Result<i64, Error> {
    i64::try_from(decode_u128(code, alphabet)?).map_err(|_| Error::Overflow)
}

// ---- hiding volume -------------------------------------------------------------------------

/// A keyed, reversible permutation of 0..2^63 (the non-negative bigints): consecutive counter
/// values map to unrelated-looking ones, and the same key maps them back. It hides how many
/// records exist and in what order they came; it is not encryption for secrets.
///
/// Construction: a 4-round balanced Feistel network over 64 bits with SipHash-2-4 (keyed by the
/// 128-bit key, salted with the round number) as the round function, and cycle walking to stay
/// within 63 bits (each step leaves the range with probability 1/2, so two steps on average).
pub struct Permutation {
    k0: u64,
    k1: u64,
}

impl Permutation {
    /// Derives the 128-bit key from a passphrase's bytes, exactly as stored: in a `SQL_ASCII`
    /// or `LATIN1` database two keys that differ only in non-ASCII bytes are different keys.
    /// (A UTF-8 passphrase hashes the same bytes as its `&str` did before 0.2.0, so codes
    /// made under it do not change.)
    pub fn from_key(key: &[u8]) -> Permutation {
        let half = |salt: u64| {
            let mut h = SipHasher24::new_with_keys(0x6964_6765_6e2d_6b65, salt);
            h.write(key);
            h.finish()
        };
        Permutation {
            k0: half(1),
            k1: half(2),
        }
    }

    fn round(&self, round: u32, half: u32) -> u32 {
        let mut h = SipHasher24::new_with_keys(self.k0, self.k1);
        h.write_u32(round);
        h.write_u32(half);
        h.finish() as u32
    }

    fn feistel(&self, x: u64) -> u64 {
        let (mut left, mut right) = ((x >> 32) as u32, x as u32);
        for r in 0..4 {
            (left, right) = (right, left ^ self.round(r, right));
        }
        (u64::from(left) << 32) | u64::from(right)
    }

    fn feistel_inverse(&self, x: u64) -> u64 {
        let (mut left, mut right) = ((x >> 32) as u32, x as u32);
        for r in (0..4).rev() {
            (left, right) = (right ^ self.round(r, left), left);
        }
        (u64::from(left) << 32) | u64::from(right)
    }

    pub fn permute(&self, n: i64) -> Result<i64, Error> {
        let mut x = u64::try_from(n).map_err(|_| Error::Negative(n))?;
        loop {
            x = self.feistel(x);
            if x <= i64::MAX as u64 {
                return Ok(x as i64);
            }
        }
    }

    pub fn unpermute(&self, n: i64) -> Result<i64, Error> {
        let mut x = u64::try_from(n).map_err(|_| Error::Negative(n))?;
        loop {
            x = self.feistel_inverse(x);
            if x <= i64::MAX as u64 {
                return Ok(x as i64);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Is this alphabet in ASCII order, so that fixed-width codes sort like their numbers?
    fn is_ascii_ordered(a: &Alphabet) -> bool {
        a.digits.windows(2).all(|w| w[0] < w[1])
    }

    /// Any 62 distinct printable ASCII characters, in any order.
    fn alphabets() -> impl Strategy<Value = String> {
        Just((33u8..127).collect::<Vec<u8>>())
            .prop_shuffle()
            .prop_map(|chars| String::from_utf8(chars[..62].to_vec()).unwrap())
    }

    proptest! {
        #[test]
        fn round_trips_for_every_bigint_and_alphabet(n in 0..=i64::MAX, alpha in alphabets(), width in 0i64..=20) {
            let a = Alphabet::new(alpha.as_bytes()).unwrap();
            match encode(n, width, &a) {
                Ok(code) => {
                    prop_assert!(width == 0 || code.len() == width as usize);
                    prop_assert_eq!(decode(&code, &a).unwrap(), n);
                }
                Err(Error::TooWide { digits, .. }) => prop_assert!(width > 0 && (digits as i64) > width),
                Err(e) => prop_assert!(false, "{e}"),
            }
        }

        #[test]
        fn the_bigint_path_agrees_with_the_u128_one(n in 0..=i64::MAX, alpha in alphabets(), width in 0i64..=20) {
            // encode() sizes first and writes in place (as the SQL function does); encode_u128()
            // divides into a buffer and pads after: two independent ways to one answer.
            let a = Alphabet::new(alpha.as_bytes()).unwrap();
            prop_assert_eq!(encode(n, width, &a), encode_u128(n as u128, width, &a));
        }

        #[test]
        fn padded_codes_sort_like_the_numbers(a in 0..=i64::MAX, b in 0..=i64::MAX) {
            let alpha = Alphabet::default_alphabet();
            let (ca, cb) = (encode(a, 11, alpha).unwrap(), encode(b, 11, alpha).unwrap());
            prop_assert_eq!(ca.as_bytes().cmp(cb.as_bytes()), a.cmp(&b));
        }

        #[test]
        fn uuid_codes_round_trip_and_sort(a: u128, b: u128) {
            let alpha = Alphabet::default_alphabet();
            let (ca, cb) = (encode_u128(a, 22, alpha).unwrap(), encode_u128(b, 22, alpha).unwrap());
            prop_assert_eq!(ca.len(), 22);
            prop_assert_eq!(decode_u128(&ca, alpha).unwrap(), a);
            prop_assert_eq!(ca.cmp(&cb), a.cmp(&b));
        }

        #[test]
        fn the_permutation_round_trips_and_stays_in_range(n in 0..=i64::MAX, key in ".{0,40}") {
            let p = Permutation::from_key(key.as_bytes());
            let m = p.permute(n).unwrap();
            prop_assert!(m >= 0);
            prop_assert_eq!(p.unpermute(m).unwrap(), n);
        }
    }

    #[test]
    fn the_key_is_hashed_as_bytes_and_utf8_keys_keep_their_codes() {
        // Codes made by 0.1.0 (which hashed the key as a &str) under this UTF-8 key, from the
        // SQL suite's expected output: existing databases must keep decoding them.
        let p = Permutation::from_key("correct horse battery staple".as_bytes());
        let codes: Vec<String> = (1..=3)
            .map(|n| encode(p.permute(n).unwrap(), 11, Alphabet::default_alphabet()).unwrap())
            .collect();
        assert_eq!(codes, ["6IzK9jCkdg2", "1A79K7nnAk1", "9JpQw5aqrvC"]);
        // LATIN1 "café" and "cafè": one byte apart, and not valid UTF-8. A lossy conversion
        // turned both into "caf\u{fffd}" and so into one permutation.
        let (e_acute, e_grave) = (
            Permutation::from_key(b"caf\xe9"),
            Permutation::from_key(b"caf\xe8"),
        );
        assert_ne!(e_acute.permute(1).unwrap(), e_grave.permute(1).unwrap());
    }

    #[test]
    fn the_permutation_is_a_bijection_on_a_window_and_depends_on_the_key() {
        let p = Permutation::from_key(b"k1");
        let images: std::collections::HashSet<i64> =
            (0..100_000).map(|n| p.permute(n).unwrap()).collect();
        assert_eq!(images.len(), 100_000, "no two inputs share an image");
        let q = Permutation::from_key(b"k2");
        assert_ne!(p.permute(1).unwrap(), q.permute(1).unwrap());
        // Consecutive inputs land far apart.
        let spread = (0..1000)
            .filter(|&n| (p.permute(n).unwrap() - p.permute(n + 1).unwrap()).abs() < 1 << 40)
            .count();
        assert!(spread < 5, "{spread} neighbours stayed close");
    }

    #[test]
    fn unpadded_codes_do_not_sort_like_the_numbers() {
        let a = Alphabet::default_alphabet();
        assert!(encode(61, 0, a).unwrap() > encode(62, 0, a).unwrap()); // "z" > "10"
    }

    #[test]
    fn digit_counts_step_at_each_power_of_62() {
        assert_eq!(digit_count(0), 1);
        assert_eq!(digit_count(u64::MAX), 11);
        let mut p: u64 = 1;
        for d in 1..=10 {
            p *= 62; // 62^d, the first number of d + 1 digits
            assert_eq!(digit_count(p - 1), d, "62^{d} - 1");
            assert_eq!(digit_count(p), d + 1, "62^{d}");
        }
    }

    #[test]
    fn small_numbers_and_powers_agree_with_the_u128_path() {
        // Every one- and two-digit step of write_code (below 62, below 62², the first pairs),
        // and each side of every power of 62, at every width that fits.
        let a = Alphabet::default_alphabet();
        let mut ns: Vec<i64> = (0..300_000).collect();
        let mut p: i64 = 1;
        for _ in 1..=10 {
            p *= 62;
            ns.extend([p - 1, p, p + 1]);
        }
        ns.push(i64::MAX);
        for n in ns {
            for width in [0, 11, 12, 64] {
                assert_eq!(
                    encode(n, width, a),
                    encode_u128(n as u128, width, a),
                    "n={n} width={width}"
                );
            }
        }
    }

    #[test]
    fn edges() {
        let a = Alphabet::default_alphabet();
        assert_eq!(encode(0, 0, a).unwrap(), "0");
        assert_eq!(encode(61, 0, a).unwrap(), "z");
        assert_eq!(encode(62, 0, a).unwrap(), "10");
        assert_eq!(encode(i64::MAX, 0, a).unwrap(), "AzL8n0Y58m7");
        assert_eq!(encode(5, 3, a).unwrap(), "005");
        assert_eq!(decode("AzL8n0Y58m7", a).unwrap(), i64::MAX);
        assert_eq!(decode("AzL8n0Y58m8", a), Err(Error::Overflow));
        assert_eq!(decode("zzzzzzzzzzzzzzzzzzzzzzzzz", a), Err(Error::Overflow));
        assert_eq!(decode("", a), Err(Error::Empty));
        assert_eq!(
            decode("ab-c", a),
            Err(Error::BadCharacter {
                character: '-',
                position: 3
            })
        );
        assert_eq!(
            decode("é", a),
            Err(Error::BadCharacter {
                character: 'é',
                position: 1
            })
        );
        assert_eq!(encode(-1, 0, a), Err(Error::Negative(-1)));
        assert_eq!(encode(1, -1, a), Err(Error::BadWidth(-1)));
        assert_eq!(encode(1, 65, a), Err(Error::BadWidth(65)));
        assert_eq!(
            encode(62, 1, a),
            Err(Error::TooWide {
                digits: 2,
                width: 1
            })
        );
        assert!(is_ascii_ordered(a));
    }

    #[test]
    fn errors_say_what_went_wrong() {
        let texts: Vec<String> = [
            Error::BadAlphabet("it must be ASCII".into()),
            Error::Negative(-7),
            Error::BadWidth(65),
            Error::TooWide {
                digits: 2,
                width: 1,
            },
            Error::Empty,
            Error::BadCharacter {
                character: '-',
                position: 3,
            },
            Error::Overflow,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            texts,
            [
                "invalid base62 alphabet: it must be ASCII",
                "cannot base62-encode a negative number (-7)",
                "base62 width 65 is out of range 0..64",
                "the value needs 2 base62 digits, more than width 1",
                "cannot decode an empty base62 code",
                "invalid base62 character '-' at position 3",
                "base62 code is out of range for the result type",
            ]
        );
    }

    /// The SQL layer caches an alphabet and compares it with the argument by these bytes: they
    /// are the text it was made from, the digit of value n at index n.
    #[test]
    fn as_bytes_is_the_alphabet_in_digit_order() {
        let default = Alphabet::default_alphabet();
        assert_eq!(default.as_bytes(), DEFAULT_ALPHABET.as_bytes());
        let article = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let a = Alphabet::new(article).unwrap();
        assert_eq!(a.as_bytes(), article);
        for (n, &digit) in a.as_bytes().iter().enumerate() {
            assert_eq!(encode(n as i64, 0, &a).unwrap().as_bytes(), [digit]);
        }
    }

    #[test]
    fn bad_alphabets_are_refused() {
        assert!(matches!(Alphabet::new(b"abc"), Err(Error::BadAlphabet(_))));
        let dup = format!("{}0", &DEFAULT_ALPHABET[..61]);
        assert!(
            matches!(Alphabet::new(dup.as_bytes()), Err(Error::BadAlphabet(why)) if why.contains("twice"))
        );
        let non_ascii = format!("{}é", &DEFAULT_ALPHABET[..60]);
        assert!(matches!(
            Alphabet::new(non_ascii.as_bytes()),
            Err(Error::BadAlphabet(_))
        ));
        // The article's alphabet: a-z A-Z 0-9 — valid, but not in ASCII order.
        let article = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
        let a = Alphabet::new(article.as_bytes()).unwrap();
        assert!(!is_ascii_ordered(&a));
        assert_eq!(encode(0, 0, &a).unwrap(), "a");
        assert_eq!(decode("ba", &a).unwrap(), 62);
    }
}
