//! Output files: written to a temporary file in the output directory, flushed to disk, then
//! renamed onto the final name, so a file under its final name is always complete.
//!
//! Temporary names start with [`TEMP_PREFIX`] (a leading `.`, which item ids may not have), so
//! they never look like a final file; leftovers of a killed run are removed when the next run
//! takes the directory.

use std::{
    fs::File,
    io::{self, Write},
    path::{Path, PathBuf},
};

use crate::format::Format;

/// Prefix of every temporary file voxctl creates in the output directory.
pub const TEMP_PREFIX: &str = ".voxctl-tmp-";

/// The final file name of an item: `<id>.<extension>`.
pub fn file_name(id: &str, format: Format) -> String {
    format!("{id}.{}", format.extension())
}

/// The final path of an item.
pub fn final_path(dir: &Path, id: &str, format: Format) -> PathBuf {
    dir.join(file_name(id, format))
}

/// Writes `bytes` to `dir/name` atomically: temp file, `fsync`, rename. The file gets the
/// permissions any new file of the user gets (0666 less the umask), not a temp file's 0600.
pub fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut tmp = tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .suffix(".part")
        .permissions(std::fs::Permissions::from_mode(0o666))
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dir.join(name)).map_err(|e| e.error)?;
    Ok(())
}

/// Flushes a directory's entries (new and renamed files) to disk.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes temporary files left by an interrupted run; returns how many.
pub fn remove_stale_temps(dir: &Path) -> io::Result<usize> {
    let mut removed = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            std::fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_atomic_write_leaves_only_the_final_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        write_atomic(dir.path(), "a.wav", b"data").expect("write");
        write_atomic(dir.path(), "a.wav", b"newer").expect("overwrite");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read_dir")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf8"))
            .collect();
        assert_eq!(names, ["a.wav"]);
        assert_eq!(
            std::fs::read(dir.path().join("a.wav")).expect("read"),
            b"newer"
        );
    }

    #[test]
    fn output_files_get_the_mode_the_umask_gives_new_files() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().expect("tempdir");
        write_atomic(dir.path(), "a.wav", b"data").expect("write");
        // What the umask makes of a plainly created file, for comparison.
        std::fs::write(dir.path().join("plain"), b"x").expect("plain file");
        let mode = |n: &str| {
            std::fs::metadata(dir.path().join(n))
                .expect("metadata")
                .permissions()
                .mode()
                & 0o777
        };
        assert_eq!(
            mode("a.wav"),
            mode("plain"),
            "not a temp file's private 0600"
        );
    }

    #[test]
    fn stale_temporary_files_are_removed_and_final_files_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(format!("{TEMP_PREFIX}abc.part")), b"half").expect("w");
        std::fs::write(dir.path().join("done.wav"), b"full").expect("w");
        assert_eq!(remove_stale_temps(dir.path()).expect("clean"), 1);
        assert!(dir.path().join("done.wav").exists());
        assert_eq!(std::fs::read_dir(dir.path()).expect("read_dir").count(), 1);
    }

    #[test]
    fn final_names_never_start_with_the_temporary_prefix() {
        assert_eq!(file_name("chapter-1", Format::OggOpus), "chapter-1.ogg");
        assert!(!file_name("x", Format::Wav).starts_with('.'));
    }
}
