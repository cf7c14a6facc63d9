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

/// An aligned table: `header`, then one line per row, columns two spaces apart and padded to
/// their widest cell in terminal columns ([`pad`]); no trailing spaces.
pub fn table<R: AsRef<[String]>>(header: &[&str], rows: &[R]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| width(h)).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row.as_ref()) {
            *w = (*w).max(width(cell));
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (cell, w) in cells.iter().zip(&widths) {
            s.push_str(&pad(cell, *w));
            s.push_str("  ");
        }
        s.trim_end().to_owned()
    };
    let mut out = vec![line(header.to_vec())];
    out.extend(
        rows.iter()
            .map(|r| line(r.as_ref().iter().map(String::as_str).collect())),
    );
    out.join("\n")
}

/// `bytes` for people, in binary units: `512 B`, `1.5 KiB`, `54.2 MiB`, `1.0 GiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
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

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(super::human_bytes(0), "0 B");
        assert_eq!(super::human_bytes(1023), "1023 B");
        assert_eq!(super::human_bytes(1536), "1.5 KiB");
        assert_eq!(super::human_bytes(56_789_012), "54.2 MiB");
        assert_eq!(super::human_bytes(1 << 30), "1.0 GiB");
    }
}
