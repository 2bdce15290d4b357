//! base62_encode() / base62_decode(), UUID <-> base62, and the keyed (volume-hiding) forms.
//!
//! All but the keyed forms are IMMUTABLE STRICT PARALLEL SAFE: the result depends only on the
//! arguments. The keyed forms read the key named by idgen.base62_key_file, so they are STABLE.

use crate::pg::errors::{self, error};
use crate::pg::settings;
use idgen_core::base62::{self, Alphabet, Permutation, DEFAULT_ALPHABET};
use pgrx::prelude::*;
use pgrx::Uuid;
use std::cell::RefCell;

#[track_caller]
fn raise(e: base62::Error) -> ! {
    let code = match e {
        base62::Error::BadAlphabet(_) | base62::Error::BadWidth(_) => errors::INVALID_PARAMETER,
        base62::Error::Empty | base62::Error::BadCharacter { .. } => errors::INVALID_TEXT,
        base62::Error::Negative(_) | base62::Error::TooWide { .. } | base62::Error::Overflow => {
            errors::NUMERIC_OUT_OF_RANGE
        }
    };
    let hint = match e {
        base62::Error::BadAlphabet(_) => {
            "An alphabet is 62 distinct ASCII characters, e.g. the default 0-9A-Za-z.".to_string()
        }
        base62::Error::BadWidth(_) => format!(
            "Use 0 for the shortest code, {} for any bigint, at most {}.",
            base62::BIGINT_WIDTH,
            base62::MAX_WIDTH
        ),
        base62::Error::TooWide { .. } => {
            format!("A width of {} fits every bigint.", base62::BIGINT_WIDTH)
        }
        base62::Error::Negative(_) => "Only non-negative numbers have base62 codes.".to_string(),
        base62::Error::Empty | base62::Error::BadCharacter { .. } => {
            "Decode with the alphabet the code was encoded with.".to_string()
        }
        base62::Error::Overflow => {
            "The code is longer or larger than any value of the result type.".to_string()
        }
    };
    error(code, e.to_string()).hint(hint).raise()
}

thread_local! {
    /// The last custom alphabet used in this backend, so that a query with one does not
    /// rebuild it for every row.
    static CUSTOM: RefCell<Option<Alphabet>> = const { RefCell::new(None) };
    static KEY: RefCell<Option<(Vec<u8>, Permutation)>> = const { RefCell::new(None) };
}

/// Runs `f` with the alphabet spelled by `text`: the default without any work beyond one
/// comparison, a custom one validated once per backend until another is used. Nothing of
/// `text` is copied before it has passed validation (62 bytes), so an argument of any length
/// costs no Rust allocation: a failed one would abort the backend and restart the server.
fn with_alphabet<T>(text: &[u8], f: impl FnOnce(&Alphabet) -> T) -> T {
    if text == DEFAULT_ALPHABET.as_bytes() {
        return f(Alphabet::default_alphabet());
    }
    CUSTOM.with_borrow_mut(|cached| {
        if !matches!(cached, Some(a) if a.as_bytes() == text) {
            *cached = Some(Alphabet::new(text).unwrap_or_else(|e| raise(e)));
        }
        f(cached.as_ref().expect("set above"))
    })
}

fn encode_with(n: i64, width: i32, alphabet: &str) -> String {
    with_alphabet(alphabet.as_bytes(), |a| {
        base62::encode(n, i64::from(width), a)
    })
    .unwrap_or_else(|e| raise(e))
}

// base62_encode(n bigint, width integer DEFAULT 0, alphabet text DEFAULT '0-9A-Za-z'), written
// against the V1 calling convention by hand. It runs once per row, and pgrx's generic path
// (a guarded FFI call to detoast the alphabet, a Rust String copied into a text) cost 1.35x
// to_hex(); here a short inline alphabet is read in place and the digits go straight into
// the palloc'd result. Every error still goes through `raise`.
extension_sql!(
    r#"
CREATE FUNCTION base62_encode(n bigint, width integer DEFAULT 0,
    alphabet text DEFAULT '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz')
RETURNS text IMMUTABLE STRICT PARALLEL SAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'idgen_base62_encode';
COMMENT ON FUNCTION base62_encode(bigint, integer, text) IS
  'A non-negative bigint as base62 text; with the default (ASCII-ordered) alphabet and a fixed width, codes sort like the numbers under COLLATE "C". Width 11 covers every bigint.';
"#,
    name = "base62_encode",
);

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_idgen_base62_encode() -> &'static pg_sys::Pg_finfo_record {
    const V1_API: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1_API
}

#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn idgen_base62_encode(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    use pgrx::fcinfo::pg_getarg_datum_raw;
    use pgrx::varlena::{
        set_varsize_4b, varatt_is_1b, varatt_is_1b_e, varatt_is_4b_u, vardata_any,
        varsize_any_exhdr,
    };
    unsafe {
        // STRICT: no argument is NULL.
        let n = pg_getarg_datum_raw(fcinfo, 0).value() as i64;
        let width = pg_getarg_datum_raw(fcinfo, 1).value() as i32;
        let mut text = pg_getarg_datum_raw(fcinfo, 2).cast_mut_ptr::<pg_sys::varlena>();
        if !(varatt_is_4b_u(text) || (varatt_is_1b(text) && !varatt_is_1b_e(text))) {
            text = pg_sys::pg_detoast_datum_packed(text); // compressed or out of line
        }
        let text =
            std::slice::from_raw_parts(vardata_any(text).cast::<u8>(), varsize_any_exhdr(text));
        // The alphabet, kept in fn_extra for the rest of the query, as PostgreSQL's own
        // functions cache per-call-site state. "Stable" arguments are not constant: a PL/pgSQL
        // variable, NEW.col or a loop variable is a Param whose value changes from call to call
        // at the same call site. So the cached alphabet serves only a call whose 62 bytes it
        // equals (one 62-byte comparison a row); any other alphabet is looked up (and checked)
        // again and replaces it. The default alphabet is a static; a custom one is copied out of
        // the backend's cache, so that no RefCell is borrowed across palloc below.
        let flinfo = (*fcinfo).flinfo;
        let cached = (*flinfo).fn_extra.cast::<Alphabet>();
        let custom: Alphabet;
        let alphabet: &Alphabet = if !cached.is_null() && (*cached).as_bytes() == text {
            &*cached
        } else {
            let a = if text == DEFAULT_ALPHABET.as_bytes() {
                Alphabet::default_alphabet()
            } else {
                custom = with_alphabet(text, Alphabet::clone);
                &custom
            };
            let keep = if cached.is_null() {
                pg_sys::MemoryContextAlloc((*flinfo).fn_mcxt, size_of::<Alphabet>())
                    .cast::<Alphabet>()
            } else {
                cached
            };
            keep.write(a.clone());
            (*flinfo).fn_extra = keep.cast();
            a
        };
        let len = base62::code_len(n, i64::from(width)).unwrap_or_else(|e| raise(e));
        // palloc without pgrx's FFI guard (a sigsetjmp per call, 11 ns a row: a third of the
        // function's cost). If it raises (out of memory), PostgreSQL's longjmp skips only this
        // frame and the #[pg_guard] one around it, and no value with a destructor is alive in
        // either (`Alphabet` is plain bytes; no RefCell is borrowed).
        let size = pg_sys::VARHDRSZ + len;
        let result = crate::pg::palloc::palloc_unguarded(size).cast::<pg_sys::varlena>();
        set_varsize_4b(result, size as i32);
        // The digits go straight into the result: building them on the stack and copying the
        // buffer out stalled on store forwarding (half the function's time in perf).
        let out = std::slice::from_raw_parts_mut(result.cast::<u8>().add(pg_sys::VARHDRSZ), len);
        base62::write_code(n as u64, alphabet, out);
        pg_sys::Datum::from(result)
    }
}

fn with_permutation<T>(f: impl FnOnce(&Permutation) -> T) -> T {
    settings::with_base62_key(|key| {
        let Some(key) = key else {
            error(errors::NOT_IN_PREREQUISITE_STATE, "no base62 key: idgen.base62_key_file is not set")
                .detail("The keyed base62 functions read their passphrase from a file that only the server's OS user can read, named by idgen.base62_key_file in the server configuration. A file that could not be used is named in the server log.")
                .hint("As the server's OS user: (umask 077; echo '<a long random passphrase>' >\"$PGDATA/idgen_base62.key\"); then as a superuser: ALTER SYSTEM SET idgen.base62_key_file = 'idgen_base62.key'; SELECT pg_reload_conf(); A key kept in idgen.base62_key by idgen 0.2.0 moves in one step: see docs/base62.md in idgen's source, \"Keyed codes\".")
                .raise()
        };
        KEY.with_borrow_mut(|cached| {
            if !matches!(cached, Some((k, _)) if k.as_slice() == key) {
                *cached = Some((key.to_vec(), Permutation::from_key(key)));
            }
            f(&cached.as_ref().expect("set above").1)
        })
    })
}

/// `sql` is `text` in single quotes.
const fn is_quoted(sql: &str, text: &str) -> bool {
    let (sql, text) = (sql.as_bytes(), text.as_bytes());
    if sql.len() != text.len() + 2 || sql[0] != b'\'' || sql[sql.len() - 1] != b'\'' {
        return false;
    }
    let mut i = 0;
    while i < text.len() {
        if sql[i + 1] != text[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// Declares every pgrx function that takes an alphabet, with `$alphabet` as the SQL default:
/// the default alphabet is written once below, and the compiler checks it against the core's
/// `DEFAULT_ALPHABET` (pgrx's `default!` takes only a literal token, hence the macro).
/// base62_encode's hand-written SQL above repeats it once; the SQL suite checks every
/// function's arguments and defaults.
macro_rules! base62_functions {
    ($alphabet:tt) => {
        const _: () = assert!(is_quoted($alphabet, DEFAULT_ALPHABET));

        #[pg_extern(immutable, strict, parallel_safe)]
        fn base62_decode(code: &str, alphabet: default!(&str, $alphabet)) -> i64 {
            with_alphabet(alphabet.as_bytes(), |a| base62::decode(code, a))
                .unwrap_or_else(|e| raise(e))
        }

        /// A UUID as 22 base62 characters: compact for URLs, and in the same order as the UUIDs
        /// under COLLATE "C" with an ASCII-ordered alphabet.
        #[pg_extern(immutable, strict, parallel_safe)]
        fn uuid_to_base62(id: Uuid, alphabet: default!(&str, $alphabet)) -> String {
            let value = u128::from_be_bytes(*id.as_bytes());
            with_alphabet(alphabet.as_bytes(), |a| {
                base62::encode_u128(value, base62::UUID_WIDTH as i64, a)
            })
            .unwrap_or_else(|e| raise(e))
        }

        #[pg_extern(immutable, strict, parallel_safe)]
        fn base62_to_uuid(code: &str, alphabet: default!(&str, $alphabet)) -> Uuid {
            let value = with_alphabet(alphabet.as_bytes(), |a| base62::decode_u128(code, a))
                .unwrap_or_else(|e| raise(e));
            Uuid::from_bytes(value.to_be_bytes())
        }

        /// Like base62_encode(), after a keyed permutation of the number: consecutive counter
        /// values give unrelated-looking codes, and base62_decode_keyed() with the same key gives
        /// the number back. Hides how many records exist; it is not encryption.
        #[pg_extern(stable, strict, parallel_safe)]
        fn base62_encode_keyed(
            n: i64,
            width: default!(i32, 11),
            alphabet: default!(&str, $alphabet),
        ) -> String {
            let hidden = with_permutation(|p| p.permute(n)).unwrap_or_else(|e| raise(e));
            encode_with(hidden, width, alphabet)
        }

        #[pg_extern(stable, strict, parallel_safe)]
        fn base62_decode_keyed(code: &str, alphabet: default!(&str, $alphabet)) -> i64 {
            let hidden = with_alphabet(alphabet.as_bytes(), |a| base62::decode(code, a))
                .unwrap_or_else(|e| raise(e));
            with_permutation(|p| p.unpermute(hidden)).unwrap_or_else(|e| raise(e))
        }
    };
}

base62_functions!("'0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz'");
