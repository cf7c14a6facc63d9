//! Guards the scheduler's source layout: no production source file over [`MAX_LINES`]
//! lines, an inline `#[cfg(test)]` test module aside (the file is counted up to it). A file
//! that grows past it is split by concern, as `store/memory/` and `store/redis/` are.

use std::path::{Path, PathBuf};

/// The most lines a production source file of the scheduler may have.
const MAX_LINES: usize = 450;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` before its test module.
fn production_lines(text: &str) -> usize {
    text.lines()
        .take_while(|l| l.trim() != "#[cfg(test)]")
        .count()
}

#[test]
fn no_production_source_file_is_over_the_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(
        files.len() > 10,
        "found the sources under {}",
        src.display()
    );
    let over: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = production_lines(&std::fs::read_to_string(f).expect("read source"));
            (n > MAX_LINES).then(|| format!("{} ({n} lines)", f.display()))
        })
        .collect();
    assert!(
        over.is_empty(),
        "split these by concern (at most {MAX_LINES} lines before the test module): {over:?}"
    );
}

#[test]
fn the_count_stops_at_the_test_module() {
    let text = "fn a() {}\nfn b() {}\n#[cfg(test)]\nmod tests {\n}\n";
    assert_eq!(production_lines(text), 2);
}
