//! Short codes for a fleet: short_code_next() (blocks of a registry counter) and
//! worker_code_next() (a sequence of the server's beside its worker id), and the status of the
//! counters a server issues from.
//!
//! Both makers are VOLATILE (each call takes a number) and PARALLEL UNSAFE, as nextval() is:
//! they take numbers from shared state or write WAL, which a parallel worker may not.

use crate::pg::errors::{self, error};
use crate::pg::{short_codes, worker_codes};
use idgen_core::base62::{self, Alphabet};
use idgen_core::short_code::Block;
use pgrx::prelude::*;
use pgrx::PgRelation;
use std::cell::RefCell;

fn code(n: u64, width: u32) -> String {
    base62::encode(n as i64, i64::from(width), Alphabet::default_alphabet()).unwrap_or_else(|e| {
        error(
            errors::NUMERIC_OUT_OF_RANGE,
            format!("number {n} has no code of {width} digits: {e:?}"),
        )
        .raise()
    })
}

// short_code_next(counter text): the next code of the registry's counter `counter`, at the width
// the counter was created with, from this server's block in hand with no call to the registry
// (the block worker takes the next block ahead of need). Written against the V1 calling
// convention by hand, as base62_encode() is: it runs once per row, and the counter's name is
// read in place and the code written straight into the result. A backend takes numbers from the
// server's block a few at a time (`short_codes::CHUNK`) and issues them with no lock.
extension_sql!(
    r#"
CREATE FUNCTION short_code_next(counter text) RETURNS text
STRICT VOLATILE PARALLEL UNSAFE
LANGUAGE c AS 'MODULE_PATHNAME', 'idgen_short_code_next';
COMMENT ON FUNCTION short_code_next(text) IS
  'The next code of a counter of the worker-id registry (idgen.registry), from blocks the registry grants this server once each: distinct across the fleet, of the width the counter was created with.';
"#,
    name = "short_code_next",
);

/// This backend's numbers of each counter, taken from its server's block.
struct Local {
    name: Vec<u8>,
    slot: Option<usize>,
    chunk: Block,
    width: u32,
}

thread_local! {
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

#[unsafe(no_mangle)]
#[doc(hidden)]
pub extern "C" fn pg_finfo_idgen_short_code_next() -> &'static pg_sys::Pg_finfo_record {
    const V1_API: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1_API
}

#[unsafe(no_mangle)]
#[pg_guard]
pub unsafe extern "C-unwind" fn idgen_short_code_next(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    use pgrx::fcinfo::pg_getarg_datum_raw;
    use pgrx::varlena::{
        set_varsize_4b, varatt_is_1b, varatt_is_1b_e, varatt_is_4b_u, vardata_any,
        varsize_any_exhdr,
    };
    unsafe {
        // STRICT: the argument is not NULL.
        let mut text = pg_getarg_datum_raw(fcinfo, 0).cast_mut_ptr::<pg_sys::varlena>();
        if !(varatt_is_4b_u(text) || (varatt_is_1b(text) && !varatt_is_1b_e(text))) {
            text = pg_sys::pg_detoast_datum_packed(text); // compressed or out of line
        }
        let name =
            std::slice::from_raw_parts(vardata_any(text).cast::<u8>(), varsize_any_exhdr(text));
        let (n, width) = next_number(name);
        let len = base62::code_len(n as i64, i64::from(width)).unwrap_or_else(|e| {
            error(
                errors::NUMERIC_OUT_OF_RANGE,
                format!("number {n} has no code of {width} digits: {e:?}"),
            )
            .raise()
        });
        // As base62_encode(): nothing with a destructor is alive here and no RefCell borrowed.
        let size = pg_sys::VARHDRSZ + len;
        let result = crate::pg::palloc::palloc_unguarded(size).cast::<pg_sys::varlena>();
        set_varsize_4b(result, size as i32);
        let out = std::slice::from_raw_parts_mut(result.cast::<u8>().add(pg_sys::VARHDRSZ), len);
        base62::write_code(n, Alphabet::default_alphabet(), out);
        pg_sys::Datum::from(result)
    }
}

/// The next number of counter `name` for this backend, and its width.
fn next_number(name: &[u8]) -> (u64, u32) {
    let local = LOCAL.with_borrow_mut(|locals| {
        let l = locals.iter_mut().find(|l| l.name == name)?;
        if l.chunk.is_empty() {
            return None;
        }
        let n = l.chunk.start;
        l.chunk.start += 1;
        Some((n, l.width))
    });
    if let Some(got) = local {
        return got;
    }
    let text = String::from_utf8_lossy(name).into_owned();
    let mut slot =
        LOCAL.with_borrow(|locals| locals.iter().find(|l| l.name == name).and_then(|l| l.slot));
    // May raise: no borrow is alive across it.
    let (block, width) = short_codes::take(&text, &mut slot);
    LOCAL.with_borrow_mut(|locals| {
        let rest = Block {
            start: block.start + 1,
            end: block.end,
        };
        match locals.iter_mut().find(|l| l.name == name) {
            Some(l) => {
                l.slot = slot;
                l.chunk = rest;
                l.width = width;
            }
            None => locals.push(Local {
                name: name.to_vec(),
                slot,
                chunk: rest,
                width,
            }),
        }
    });
    (block.start, width)
}

/// The next code of sequence `counter` (this server's) carrying this server's worker id, at
/// `width` digits: `nextval`'s value times the number of worker ids, plus this server's.
#[pg_extern(volatile, strict, parallel_unsafe)]
fn worker_code_next(counter: PgRelation, width: default!(i32, 7)) -> String {
    // SAFETY: an open relation's pg_class row.
    let persistence = unsafe { (*counter.rd_rel).relpersistence } as u8;
    let n = worker_codes::next(counter.oid(), counter.name(), persistence, width);
    code(n, width as u32)
}

/// The counters this server issues short codes of, since it started: for superusers and
/// members of pg_monitor (as idgen_stats()).
#[pg_extern(volatile, parallel_safe)]
#[allow(clippy::type_complexity)]
fn idgen_short_code_status() -> TableIterator<
    'static,
    (
        name!(counter, String),
        name!(width, Option<i32>),
        name!(in_hand, i64),
        name!(issued, i64),
        name!(blocks_taken, i64),
        name!(last_block_ms, Option<f64>),
        name!(mean_block_ms, Option<f64>),
        name!(failing, bool),
        name!(last_error, Option<String>),
    ),
> {
    let may_read = unsafe {
        pg_sys::has_privs_of_role(
            pg_sys::GetUserId(),
            pg_sys::Oid::from(pg_sys::ROLE_PG_MONITOR),
        )
    };
    if !may_read {
        error(errors::INSUFFICIENT_PRIVILEGE, "permission denied for function idgen_short_code_status")
            .detail("idgen_short_code_status() shows how many codes this server issued: activity data, for superusers and members of pg_monitor only.")
            .hint("A superuser can GRANT pg_monitor TO the role that needs it.")
            .raise();
    }
    let rows = short_codes::status().into_iter().map(|s| {
        let taken = s.blocks_taken > 0;
        (
            s.name,
            taken.then_some(s.width as i32),
            s.in_hand as i64,
            s.issued as i64,
            s.blocks_taken as i64,
            taken.then_some(s.last_take_us as f64 / 1000.0),
            taken.then_some(s.mean_take_us as f64 / 1000.0),
            s.failing,
            (!s.text.is_empty()).then_some(s.text),
        )
    });
    TableIterator::new(rows.collect::<Vec<_>>())
}
