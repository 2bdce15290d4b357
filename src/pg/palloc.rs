//! PostgreSQL's allocator, for the per-row functions that build their result themselves.

unsafe extern "C-unwind" {
    /// PostgreSQL's palloc(), called without pgrx's FFI guard (a sigsetjmp per call, about
    /// 11 ns: a third of a per-row function's cost). Only for functions called once per row
    /// that have nothing with a destructor alive, and no RefCell borrowed, in any Rust frame
    /// between them and their `#[pg_guard]` entry point: if it raises (out of memory),
    /// PostgreSQL's longjmp skips those frames. See base62_encode and uuid_v7.
    #[link_name = "palloc"]
    pub fn palloc_unguarded(size: usize) -> *mut std::ffi::c_void;
}
