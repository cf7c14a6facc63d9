//! Guards the source layout of the whole workspace: no production source file over
//! [`MAX_LINES`] lines. A file is counted up to its inline test module (`#[cfg(test)]` followed
//! by `mod`); test files (`tests.rs`, `*_tests.rs`, anything under a `tests/` or `benches/`
//! folder) are not production code. A file that grows past the limit is split by concern, as
//! the scheduler's `store/memory/` and the fake vendors' `knobs.rs` / `wire.rs` are.

use std::path::{Path, PathBuf};

use voxpool_e2e::workspace_root;

/// The most lines a production source file may have.
const MAX_LINES: usize = 450;

/// The folders whose `src/` trees hold production code.
const ROOTS: &[&str] = &["services", "shared", "proto", "migrations"];

/// Every `.rs` file under `dir` that is production code (see the module doc).
fn production_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.expect("dir entry").path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if path.is_dir() {
            if !matches!(name.as_str(), "tests" | "benches" | "target") {
                production_files(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" && !name.ends_with("_tests.rs") {
            out.push(path);
        }
    }
}

/// The lines of `text` before its inline test module: a `#[cfg(test)]` line whose next
/// non-blank line declares a `mod` (a `#[cfg(test)]` on a single item does not end the count).
fn production_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.trim() == "#[cfg(test)]" {
            let next = lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .find(|l| !l.is_empty());
            if next.is_some_and(|l| l.starts_with("mod ") || l.starts_with("pub mod ")) {
                return i;
            }
        }
    }
    lines.len()
}

#[test]
fn no_production_source_file_is_over_the_limit() {
    let root = workspace_root();
    let mut files = Vec::new();
    for dir in ROOTS {
        production_files(&root.join(dir), &mut files);
    }
    assert!(
        files
            .iter()
            .any(|f| f.ends_with("services/scheduler/src/main.rs"))
            && files
                .iter()
                .any(|f| f.ends_with("shared/domain/src/lib.rs")),
        "found the sources under {}",
        root.display()
    );
    let over: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = production_lines(&std::fs::read_to_string(f).expect("read source"));
            let shown = f.strip_prefix(&root).unwrap_or(f).display().to_string();
            (n > MAX_LINES).then(|| format!("{shown} ({n} lines)"))
        })
        .collect();
    assert!(
        over.is_empty(),
        "split these by concern (at most {MAX_LINES} lines before the test module): {over:?}"
    );
}

#[test]
fn the_count_stops_at_the_test_module_only() {
    let module = "fn a() {}\nfn b() {}\n#[cfg(test)]\nmod tests {\n}\n";
    assert_eq!(production_lines(module), 2);
    let item = "#[cfg(test)]\ntype T = u8;\nfn a() {}\n#[cfg(test)]\n\nmod tests;\n";
    assert_eq!(
        production_lines(item),
        3,
        "a cfg(test) item is production-file lines"
    );
    assert_eq!(production_lines("fn a() {}\n"), 1);
}

#[test]
fn test_files_are_not_production_code() {
    let root = workspace_root();
    let mut files = Vec::new();
    production_files(&root.join("services/synthesis"), &mut files);
    assert!(files.iter().any(|f| f.ends_with("src/job/mod.rs")));
    assert!(
        files.iter().all(|f| {
            let s = f.to_string_lossy();
            !s.contains("/tests/") && !s.contains("/benches/") && !s.ends_with("_tests.rs")
        }),
        "test files were counted: {files:?}"
    );
}
