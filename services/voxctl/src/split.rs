//! Splits a text longer than the server's per-request maximum into parts of at most
//! `max_chars` characters, cutting at paragraph boundaries first, then at sentence ends, then
//! between words, and only as a last resort inside a word.
//!
//! Invariant: the parts, concatenated, are exactly the input (separators stay at the end of the
//! part they follow), and no part is longer than `max_chars` characters (Unicode scalar
//! values, the unit the server counts).

/// Splits `text` into parts of at most `max_chars` characters (see the module doc).
/// `max_chars` of 0 is treated as 1.
pub fn split(text: &str, max_chars: usize) -> Vec<&str> {
    let max = max_chars.max(1);
    if chars(text) <= max {
        return vec![text];
    }
    let mut pieces = Vec::new();
    for paragraph in paragraphs(text) {
        refine(paragraph, max, 0, &mut pieces);
    }
    pack(text, &pieces, max)
}

fn chars(s: &str) -> usize {
    s.chars().count()
}

/// Cuts `piece` at the next finer level until every fragment fits.
fn refine<'a>(piece: &'a str, max: usize, level: u8, out: &mut Vec<&'a str>) {
    if chars(piece) <= max {
        out.push(piece);
        return;
    }
    match level {
        0 => sentences(piece)
            .into_iter()
            .for_each(|s| refine(s, max, 1, out)),
        1 => words(piece)
            .into_iter()
            .for_each(|w| refine(w, max, 2, out)),
        _ => out.extend(hard(piece, max)),
    }
}

/// Greedily joins consecutive fragments (contiguous slices of `text`) into parts.
fn pack<'a>(text: &'a str, pieces: &[&'a str], max: usize) -> Vec<&'a str> {
    let base = text.as_ptr() as usize;
    let offset = |s: &str| s.as_ptr() as usize - base;
    let mut parts = Vec::new();
    let (mut start, mut end, mut count) = (0usize, 0usize, 0usize);
    for piece in pieces {
        let n = chars(piece);
        if count > 0 && count + n > max {
            parts.push(&text[start..end]);
            start = end;
            count = 0;
        }
        end = offset(piece) + piece.len();
        count += n;
    }
    if end > start {
        parts.push(&text[start..end]);
    }
    parts
}

/// Paragraphs end after a whitespace run holding at least two newlines.
fn paragraphs(text: &str) -> Vec<&str> {
    let bytes = text.as_bytes();
    let (mut out, mut start, mut i) = (Vec::new(), 0, 0);
    while i < bytes.len() {
        if bytes[i] != b'\n' {
            i += 1;
            continue;
        }
        let (mut j, mut newlines) = (i, 0);
        while j < bytes.len() && bytes[j].is_ascii_whitespace() {
            newlines += usize::from(bytes[j] == b'\n');
            j += 1;
        }
        if newlines >= 2 && j < bytes.len() {
            out.push(&text[start..j]);
            start = j;
        }
        i = j;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…' | '。' | '！' | '？' | '；' | ';')
}

fn is_wide_terminator(c: char) -> bool {
    matches!(c, '。' | '！' | '？' | '；')
}

fn is_closer(c: char) -> bool {
    matches!(c, '"' | '\'' | '”' | '’' | ')' | ']' | '」' | '』' | '）')
}

/// Sentences end after terminal punctuation (and closing quotes) followed by whitespace, or
/// directly after a full-width terminator; the following whitespace stays with the sentence.
fn sentences(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let at = |k: usize| chars.get(k).map_or(text.len(), |&(i, _)| i);
    let (mut out, mut start, mut k) = (Vec::new(), 0, 0);
    while k < chars.len() {
        let c = chars[k].1;
        if !is_terminator(c) {
            k += 1;
            continue;
        }
        let mut m = k + 1;
        while m < chars.len() && (is_terminator(chars[m].1) || is_closer(chars[m].1)) {
            m += 1;
        }
        let ends = is_wide_terminator(c) || m == chars.len() || chars[m].1.is_whitespace();
        if ends {
            while m < chars.len() && chars[m].1.is_whitespace() {
                m += 1;
            }
            if m < chars.len() {
                out.push(&text[start..at(m)]);
                start = at(m);
            }
        }
        k = m;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Words with their trailing whitespace.
fn words(text: &str) -> Vec<&str> {
    let (mut out, mut start, mut in_space) = (Vec::new(), 0, false);
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            in_space = true;
        } else if in_space {
            out.push(&text[start..i]);
            start = i;
            in_space = false;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Fixed-size cuts at character boundaries.
fn hard(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (n, (i, _)) in text.char_indices().enumerate() {
        if n > 0 && n % max == 0 {
            out.push(&text[start..i]);
            start = i;
        }
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, max: usize) -> Vec<&str> {
        let parts = split(text, max);
        assert_eq!(parts.concat(), text, "parts must concatenate to the input");
        for p in &parts {
            assert!(chars(p) <= max, "part of {} chars > {max}: {p:?}", chars(p));
            assert!(!p.is_empty());
        }
        parts
    }

    #[test]
    fn a_text_within_the_limit_is_one_part() {
        assert_eq!(check("Hello there. Bye.", 100), ["Hello there. Bye."]);
    }

    #[test]
    fn paragraph_boundaries_are_preferred_over_sentence_ends() {
        let text = "One. Two. Three.\n\nFour. Five. Six.";
        assert_eq!(
            check(text, 20),
            ["One. Two. Three.\n\n", "Four. Five. Six."]
        );
    }

    #[test]
    fn a_long_paragraph_is_cut_at_sentence_ends() {
        let text = "First sentence here. Second one is here! Third? Yes.";
        let parts = check(text, 25);
        assert_eq!(
            parts,
            [
                "First sentence here. ",
                "Second one is here! ",
                "Third? Yes."
            ]
        );
    }

    #[test]
    fn abbreviation_like_dots_inside_words_do_not_end_a_sentence() {
        assert_eq!(
            sentences("Version 1.5 is out. Go."),
            ["Version 1.5 is out. ", "Go."]
        );
    }

    #[test]
    fn full_width_terminators_end_sentences_without_spaces() {
        let text = "你好。今天天气很好！我们出去吧？";
        assert_eq!(check(text, 7), ["你好。", "今天天气很好！", "我们出去吧？"]);
    }

    #[test]
    fn a_sentence_without_punctuation_is_cut_between_words_then_inside_a_word() {
        let parts = check("aaaa bbbb cccc dddddddddd", 6);
        assert_eq!(parts, ["aaaa ", "bbbb ", "cccc ", "dddddd", "dddd"]);
    }

    #[test]
    fn no_part_exceeds_the_limit_on_varied_text_and_limits() {
        let mut text = String::new();
        for i in 0..200 {
            text.push_str(&format!(
                "Sentence number {i} says something «ünïcödé» here. "
            ));
            if i % 7 == 0 {
                text.push_str("\n\n");
            }
            if i % 13 == 0 {
                text.push_str("句子。");
            }
        }
        for max in [1, 3, 17, 64, 100, 999, 20_000] {
            check(&text, max);
        }
    }
}
