//! A small XML well-formedness check for the Azure fake: balanced tags, quoted attributes,
//! only valid entity references, one root. Enough to catch SSML built without escaping. Also
//! the text content of a document (what the SSML speaks, for markers).

/// A start tag: its name and attributes (values still escaped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Tag {
    pub(crate) name: String,
    pub(crate) attrs: Vec<(String, String)>,
}

impl Tag {
    pub(crate) fn attr(&self, name: &str) -> Option<&str> {
        self.attrs
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, ':' | '-' | '_' | '.')
}

/// Checks that every `&` in `s` starts a valid entity reference.
fn check_entities(s: &str) -> Result<(), String> {
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        rest = &rest[i + 1..];
        let end = rest
            .find(';')
            .ok_or("unterminated entity reference (unescaped '&')")?;
        let entity = &rest[..end];
        let ok = matches!(entity, "amp" | "lt" | "gt" | "quot" | "apos")
            || entity
                .strip_prefix("#x")
                .is_some_and(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
            || entity
                .strip_prefix('#')
                .is_some_and(|d| !d.is_empty() && d.chars().all(|c| c.is_ascii_digit()));
        if !ok {
            return Err(format!(
                "invalid entity reference &{entity}; (unescaped '&')"
            ));
        }
        rest = &rest[end + 1..];
    }
    Ok(())
}

fn parse_tag(inner: &str) -> Result<Tag, String> {
    let name_end = inner
        .find(|c: char| !is_name_char(c))
        .unwrap_or(inner.len());
    let name = &inner[..name_end];
    if name.is_empty() {
        return Err("empty tag name".into());
    }
    let mut attrs = Vec::new();
    let mut rest = inner[name_end..].trim_start();
    while !rest.is_empty() {
        let eq = rest
            .find('=')
            .ok_or_else(|| format!("attribute without value in <{name}>"))?;
        let attr_name = rest[..eq].trim();
        if attr_name.is_empty() || !attr_name.chars().all(is_name_char) {
            return Err(format!("bad attribute name {attr_name:?} in <{name}>"));
        }
        let after = rest[eq + 1..].trim_start();
        let quote = after
            .chars()
            .next()
            .filter(|c| *c == '"' || *c == '\'')
            .ok_or("unquoted attribute value")?;
        let close = after[1..]
            .find(quote)
            .ok_or("unterminated attribute value")?;
        let value = &after[1..=close];
        if value.contains('<') {
            return Err(format!("'<' inside attribute {attr_name}"));
        }
        check_entities(value)?;
        attrs.push((attr_name.to_owned(), value.to_owned()));
        rest = after[close + 2..].trim_start();
    }
    Ok(Tag {
        name: name.to_owned(),
        attrs,
    })
}

/// The start tags of a well-formed document, in order, or why it is not well formed.
pub(crate) fn check(doc: &str) -> Result<Vec<Tag>, String> {
    let mut tags = Vec::new();
    let mut open: Vec<String> = Vec::new();
    let mut roots = 0;
    let mut rest = doc.trim();
    if let Some(after) = rest.strip_prefix("<?xml") {
        rest = after
            .split_once("?>")
            .ok_or("unterminated XML declaration")?
            .1
            .trim_start();
    }
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            return Err("text outside the root element".into());
        };
        let text = &rest[..lt];
        if text.contains('>') {
            return Err("unescaped '>' in text".into());
        }
        check_entities(text)?;
        if open.is_empty() && !text.trim().is_empty() {
            return Err("text outside the root element".into());
        }
        let gt = rest[lt..].find('>').ok_or("unterminated tag")? + lt;
        let inner = &rest[lt + 1..gt];
        if let Some(name) = inner.strip_prefix('/') {
            match open.pop() {
                Some(top) if top == name.trim() => {}
                other => return Err(format!("</{}> closes {:?}", name.trim(), other)),
            }
        } else if inner.starts_with('!') || inner.starts_with('?') {
            return Err(
                "comments, CDATA and processing instructions are not expected in SSML".into(),
            );
        } else {
            let self_closing = inner.ends_with('/');
            let tag = parse_tag(inner.trim_end_matches('/').trim_end())?;
            if open.is_empty() {
                roots += 1;
            }
            if !self_closing {
                open.push(tag.name.clone());
            }
            tags.push(tag);
        }
        rest = &rest[gt + 1..];
    }
    if let Some(top) = open.pop() {
        return Err(format!("<{top}> is never closed"));
    }
    if roots != 1 {
        return Err(format!("expected one root element, found {roots}"));
    }
    Ok(tags)
}

/// The text content of a well-formed document: its text nodes joined, entity references
/// decoded, outer whitespace trimmed (tags, attributes and the XML declaration left out).
pub(crate) fn text(doc: &str) -> String {
    let mut out = String::new();
    let mut rest = doc;
    while let Some(lt) = rest.find('<') {
        out.push_str(&rest[..lt]);
        rest = rest[lt..].find('>').map_or("", |gt| &rest[lt + gt + 1..]);
    }
    out.push_str(rest);
    decode_entities(out.trim())
}

fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        let Some(end) = rest.find(';') else {
            out.push('&');
            continue;
        };
        let entity = &rest[..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|h| u32::from_str_radix(h, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|d| d.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(c) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => out.push('&'),
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_formed_ssml_passes_and_lists_tags() {
        let tags = check("<speak version='1.0' xml:lang='en-US'><voice name=\"v\">a &amp; b &#39;<break/></voice></speak>").unwrap();
        assert_eq!(
            tags.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["speak", "voice", "break"]
        );
        assert_eq!(tags[0].attr("xml:lang"), Some("en-US"));
    }

    #[test]
    fn text_is_the_decoded_text_content() {
        assert_eq!(
            text(
                "<?xml version='1.0'?><speak version='1.0' xml:lang='en-US'><voice name='v'><prosody rate='+10%'>Tom &amp; Jerry &#39;say&#x21;&apos;</prosody></voice></speak>"
            ),
            "Tom & Jerry 'say!'"
        );
    }

    #[test]
    fn unescaped_text_and_broken_nesting_fail() {
        for bad in [
            "<speak>a & b</speak>",
            "<speak>a < b</speak>",
            "<speak><voice></speak></voice>",
            "<speak a=b></speak>",
            "<speak a='x'y'></speak>",
            "<speak></speak><speak></speak>",
            "<speak>",
            "text",
        ] {
            assert!(check(bad).is_err(), "{bad}");
        }
    }
}
