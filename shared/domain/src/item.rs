//! Items of a batch manifest or a job: their ids (also file and object names) and the seed
//! their calls use when they name none. `voxctl batch`, `voxctl job` and the jobs service apply
//! the same rules, so an item behaves the same whichever runs it.

use sha2::{Digest, Sha256};

/// Longest accepted item id, in characters (a request id adds a short suffix; the server
/// accepts 128).
pub const MAX_ITEM_ID_CHARS: usize = 100;

/// Checks that an id is usable as a file stem: 1 to [`MAX_ITEM_ID_CHARS`] of
/// `A-Z a-z 0-9 . _ -`, not starting with `.` (the prefix of voxctl's temporary and checkpoint
/// files, so a final file can never be mistaken for one). Errors: the rule, with the id quoted.
pub fn check_item_id(id: &str) -> Result<(), String> {
    let ok_chars = id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if id.is_empty() || id.chars().count() > MAX_ITEM_ID_CHARS || !ok_chars || id.starts_with('.') {
        return Err(format!(
            "invalid id {}: use 1 to {MAX_ITEM_ID_CHARS} of A-Z a-z 0-9 . _ - (not starting with .)",
            crate::untrusted::quote(id)
        ));
    }
    Ok(())
}

/// The seed of a batch or job item `id`'s calls when it names none: the first 8 bytes of
/// SHA-256 over the id, so a voice with several reference clips speaks an item with one clip,
/// also when a resumed batch or a reclaimed job item redoes it (`voxctl batch` and the jobs
/// service agree on it).
pub fn item_seed(id: &str) -> u64 {
    let digest = Sha256::digest(id.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_the_file_stem_rule() {
        for good in ["a", "item-001", "A.b_c", &"x".repeat(MAX_ITEM_ID_CHARS)] {
            assert!(check_item_id(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".hidden",
            "..",
            "a/b",
            "a b",
            &"x".repeat(MAX_ITEM_ID_CHARS + 1),
        ] {
            assert!(check_item_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_seed_is_the_first_eight_bytes_of_the_ids_sha256() {
        // SHA-256("a") = ca978112ca1bbdca...
        assert_eq!(item_seed("a"), 0xca97_8112_ca1b_bdca);
    }
}
