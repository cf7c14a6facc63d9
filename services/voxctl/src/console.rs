//! Writing to the terminal without ever failing: [`say!`](crate::say) for stderr lines and
//! [`show!`](crate::show) for stdout results.
//!
//! `eprintln!`/`println!` panic when the stream is closed (`voxctl batch … 2>&1 | head -5`
//! once `head` exits): the panic kills the task that printed — the signal handler, the
//! progress display — and leaves voxctl deaf to Ctrl-C and SIGTERM. These macros write
//! with `writeln!` and drop the error: a reader that went away loses the text, never the
//! process's ability to stop cleanly.

use std::io::Write as _;

/// Writes one line to stderr; a closed or broken stderr is ignored.
pub fn stderr_line(args: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr().lock(), "{args}");
}

/// Writes one line to stdout; a closed or broken stdout is ignored.
pub fn stdout_line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{args}");
    let _ = out.flush();
}

/// `eprintln!` that never panics (see the module doc).
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::console::stderr_line(format_args!($($arg)*))
    };
}

/// `println!` that never panics (see the module doc).
#[macro_export]
macro_rules! show {
    ($($arg:tt)*) => {
        $crate::console::stdout_line(format_args!($($arg)*))
    };
}

/// Columns `text` takes on a terminal (a CJK character takes two), for aligning tables.
pub fn width(text: &str) -> usize {
    unicode_width::UnicodeWidthStr::width(text)
}

/// `text` followed by spaces up to `columns` terminal columns (see [`width`]); `format!`'s
/// `{:<w$}` counts characters, which misaligns CJK names.
pub fn pad(text: &str, columns: usize) -> String {
    let mut padded = text.to_owned();
    padded.extend(std::iter::repeat_n(
        ' ',
        columns.saturating_sub(width(text)),
    ));
    padded
}

#[cfg(test)]
mod tests {
    #[test]
    fn wide_characters_take_two_columns_when_padding() {
        assert_eq!(super::width("温柔女声"), 8);
        assert_eq!(super::pad("温柔", 6), "温柔  ");
        assert_eq!(super::pad("calm", 6), "calm  ");
        assert_eq!(super::pad("too long", 3), "too long");
    }
}
