//! CreateJob's field errors in the terms of the command line: the server names the fields of
//! its request in a `BadRequest` (`items[0].text`, `tenant`, ...) and counts items from 0, but
//! the user wrote a manifest and flags. An item's field becomes its manifest line, as
//! `voxctl`'s own checks print it (`line 7 (id "ch-3"): text: ...`; the item → line mapping
//! is the one [`crate::manifest::Manifest`] made, which skips blank lines), a request field its
//! flag (`--tenant: ...`), and an `items[N]` inside a description `line L` too.

use std::fmt::Write as _;

use tonic::Status;
use tonic_types::StatusExt as _;

use crate::manifest::{Item, Problem};

/// The `BadRequest` field violations of `status`, each as one line in the manifest's terms
/// (see the module doc); `items` are the manifest items in the order they were sent. Empty
/// when the status carries no `BadRequest`.
pub fn problems(status: &Status, items: &[Item]) -> Vec<String> {
    let details = status.get_error_details();
    let Some(bad) = details.bad_request() else {
        return Vec::new();
    };
    bad.field_violations
        .iter()
        .map(|v| problem(&v.field, &v.description, items))
        .collect()
}

/// One violation of `field` with `description` (see the module doc).
pub fn problem(field: &str, description: &str, items: &[Item]) -> String {
    let description = crate::ops::job::view::printable(&lines_in(description, items));
    if let Some((index, key)) = item_field(field)
        && let Some(item) = items.get(index)
    {
        let message = match key {
            "" => description,
            key => format!("{}: {description}", manifest_key(key)),
        };
        return Problem {
            line: item.line,
            id: Some(item.id.clone()),
            message,
        }
        .to_string();
    }
    let flag = match field {
        "request_id" => "--request-id",
        "tenant" => "--tenant",
        "format" => "--format",
        "sample_rate_hz" => "--sample-rate",
        "priority" => "--priority",
        "webhook_url" => "--webhook-url",
        other => other,
    };
    format!(
        "{}: {description}",
        crate::ops::job::view::printable(&lines_in(flag, items))
    )
}

/// `items[N]` or `items[N].key` → `(N, key)` (`key` empty for the first form).
fn item_field(field: &str) -> Option<(usize, &str)> {
    let rest = field.strip_prefix("items[")?;
    let (index, rest) = rest.split_once(']')?;
    let index = index.parse().ok()?;
    match rest {
        "" => Some((index, "")),
        _ => rest.strip_prefix('.').map(|key| (index, key)),
    }
}

/// A `JobItemSpec` field under the name a manifest line gives it.
fn manifest_key(key: &str) -> &str {
    match key {
        "pack_id" => "packId",
        "snapshot_json" => "snapshot",
        "voice" => "packId, snapshot or card",
        other => other,
    }
}

/// `text` with every `items[N]` of a sent item replaced by `line L`.
fn lines_in(text: &str, items: &[Item]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("items[") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "items[".len()..];
        let line = after.split_once(']').and_then(|(index, tail)| {
            let item = items.get(index.parse::<usize>().ok()?)?;
            Some((item.line, tail))
        });
        match line {
            Some((line, tail)) => {
                let _ = write!(out, "line {line}");
                rest = tail;
            }
            None => {
                out.push_str("items[");
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}
