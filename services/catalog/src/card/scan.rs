//! A minimal span scanner over JSON text that is already known to be valid.
//!
//! BindVoicePack edits a card by splicing text, not by re-serializing a parsed tree: every byte
//! outside the edited member stays exactly as the client sent it (key order, whitespace,
//! number spellings such as `1.0` or `1e3`, escapes, big integers, duplicate keys). This
//! module finds the byte ranges of object members; it relies on the caller having validated
//! the text with `serde_json` first and returns `None` rather than panicking on anything
//! unexpected.

/// One `"key": value` member of an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The decoded key.
    pub key: String,
    /// Byte range of the value (start inclusive, end exclusive).
    pub value: (usize, usize),
}

/// The members of an object and where it ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Object {
    /// Byte index of the opening `{`.
    pub open: usize,
    /// Members in text order (duplicates kept).
    pub members: Vec<Member>,
    /// Byte index of the closing `}`.
    pub close: usize,
}

/// Index of the first non-whitespace byte at or after `i`.
pub fn skip_ws(s: &[u8], mut i: usize) -> usize {
    while i < s.len() && matches!(s[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

/// `i` at a `"`: index just after the closing quote.
fn skip_string(s: &[u8], mut i: usize) -> Option<usize> {
    i += 1;
    while i < s.len() {
        match s[i] {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// `i` at the first byte of a value: index just after it.
pub fn skip_value(s: &[u8], i: usize) -> Option<usize> {
    match *s.get(i)? {
        b'"' => skip_string(s, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < s.len() {
                match s[j] {
                    b'"' => {
                        j = skip_string(s, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            let mut j = i;
            while j < s.len() && !matches!(s[j], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
            {
                j += 1;
            }
            Some(j)
        }
    }
}

/// The object whose `{` is at byte `open` of `text`.
pub fn object(text: &str, open: usize) -> Option<Object> {
    let s = text.as_bytes();
    if s.get(open) != Some(&b'{') {
        return None;
    }
    let mut members = Vec::new();
    let mut i = skip_ws(s, open + 1);
    if s.get(i) == Some(&b'}') {
        return Some(Object {
            open,
            members,
            close: i,
        });
    }
    loop {
        let key_end = skip_string(s, i)?;
        let key: String = serde_json::from_str(text.get(i..key_end)?).ok()?;
        i = skip_ws(s, key_end);
        if s.get(i) != Some(&b':') {
            return None;
        }
        let start = skip_ws(s, i + 1);
        let end = skip_value(s, start)?;
        members.push(Member {
            key,
            value: (start, end),
        });
        i = skip_ws(s, end);
        match s.get(i)? {
            b',' => i = skip_ws(s, i + 1),
            b'}' => {
                return Some(Object {
                    open,
                    members,
                    close: i,
                });
            }
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_members_with_escapes_nesting_and_odd_spacing() {
        let text = r#"{ "a\"b" : "x}\"]" , "n":-1.5e3,"o":{"k":[1,{"z":"}"}]} ,"e":{} }"#;
        let o = object(text, 0).expect("object");
        let keys: Vec<_> = o.members.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(keys, ["a\"b", "n", "o", "e"]);
        let value = |k: &str| {
            let m = o.members.iter().find(|m| m.key == k).expect("member");
            &text[m.value.0..m.value.1]
        };
        assert_eq!(value("a\"b"), r#""x}\"]""#);
        assert_eq!(value("n"), "-1.5e3");
        assert_eq!(value("o"), r#"{"k":[1,{"z":"}"}]}"#);
        assert_eq!(value("e"), "{}");
        assert_eq!(&text[o.close..], "}");
    }

    #[test]
    fn decodes_escaped_keys() {
        let o = object(r#"{"\u0064ata":1}"#, 0).expect("object");
        assert_eq!(o.members[0].key, "data");
    }
}
