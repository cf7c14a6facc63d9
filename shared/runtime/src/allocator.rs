//! The servers' allocator (mimalloc, each binary's `#[global_allocator]`) told to give freed
//! memory back to the OS promptly, so a process's RSS follows its live heap.
//!
//! mimalloc 3 keeps freed pages committed for a second (its `purge_delay`; arenas ten times
//! that) before it returns them. Audio streams through a server in 64 KiB buffers, so that
//! second of throughput stays resident: with 70 stalled readers of long answers
//! (`tests/stalled_readers.rs`, debug build) synthesis's peak RSS rose 41 to 125 MB over its
//! baseline from one run to the next, over the same 46 MB of live heap (heaptrack). With a
//! 10 ms delay it rose 42 to 50 MB in every run.
//!
//! mimalloc is also built without asking the kernel for transparent huge pages (the `no_thp`
//! feature in the workspace `Cargo.toml`): where THP is `madvise` (the usual default) it asked
//! for them on its arenas, and each touched 2 MiB became resident (synthesis's idle RSS 72–84
//! MB against 44–48 MB without). Where a host sets THP to `always`, the kernel does so
//! regardless (idle RSS about 70–77 MB); the rise under load is the same.

use std::ffi::c_int;

/// `mi_option_purge_delay` in mimalloc 3's `mi_option_t` (`include/mimalloc.h`); the bindings
/// name only the options mimalloc 2 and 3 share. The test below reads it back by name.
const PURGE_DELAY: c_int = 15;
/// Freed memory is returned after this many milliseconds (mimalloc 3's default: 1,000).
pub const PURGE_DELAY_MS: i64 = 10;

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`]. Call first thing in `main`; a binary
/// without mimalloc as its allocator is unaffected.
pub fn return_freed_memory_promptly() {
    // SAFETY: mi_option_set stores an integer in mimalloc's option table (an atomic write);
    // PURGE_DELAY is an index of that table (checked by name in the test below).
    unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, PURGE_DELAY_MS) };
}

#[cfg(test)]
mod tests {
    use std::ffi::{CStr, c_char, c_void};

    use libmimalloc_sys::mi_output_fun;

    unsafe extern "C" {
        fn mi_options_print_out(out: mi_output_fun, arg: *mut c_void);
    }

    unsafe extern "C" fn collect(msg: *const c_char, arg: *mut c_void) {
        // SAFETY: mimalloc passes a NUL-terminated message and the `arg` given below.
        let (msg, out) = unsafe { (CStr::from_ptr(msg), &mut *arg.cast::<String>()) };
        out.push_str(&msg.to_string_lossy());
    }

    /// mimalloc's own listing of its options, one `option 'NAME': VALUE` line each.
    fn options() -> String {
        let mut out = String::new();
        // SAFETY: `collect` writes to `out`, which outlives the call.
        unsafe { mi_options_print_out(Some(collect), (&raw mut out).cast()) };
        out
    }

    #[test]
    fn the_purge_delay_is_set_by_its_name() {
        super::return_freed_memory_promptly();
        let listed = options();
        assert!(
            listed.contains(&format!("option 'purge_delay': {} ", super::PURGE_DELAY_MS)),
            "{listed}"
        );
    }
}
