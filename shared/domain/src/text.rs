//! Splitting text longer than a vendor's per-request limit into chunks at natural boundaries.
//!
//! [`split`] cuts greedily: each chunk is as long as the limit allows and ends at the best
//! boundary available inside it, in this order of preference:
//! 0. **paragraph**: after a blank line (a newline, optional spaces, a newline);
//! 1. **sentence**: after `。！？｡` (CJK, no space needed), after `. ! ? …` followed by
//!    whitespace or the end of the text (closing quotes / brackets stay with the sentence),
//!    after a newline; never after a common abbreviation (`Mr.`, `Mrs.`, `Dr.`, `St.`,
//!    `e.g.`, `i.e.`, `etc.`, `vs.`, …) or a single-letter initial (`J.`);
//! 2. **clause**: after `，、；：,;:—–`;
//! 3. **whitespace**: after a space, tab or newline;
//! 4. **character**: at the limit itself.
//!
//! Whitespace that follows a sentence or clause end stays with the chunk before it. No cut
//! falls inside a UTF-8 character, inside an extended grapheme cluster (Unicode UAX #29, from
//! `unicode-segmentation`: `\r\n`, a letter and its combining marks, emoji ZWJ sequences and
//! modifiers) or inside a number (`12`, `0.6`, `08:30`, `22,1`), unless such a run is itself
//! longer than the limit. Concatenating the chunks gives back the input
//! exactly; every chunk is non-empty and within the limit (a chunk holds at least one
//! character even when a single character is over a tiny byte limit).
//!
//! [`split_short_first`] cuts the first chunk short instead: it ends at the text's first
//! sentence (or paragraph) end within a bound, with the whitespace after it, so a vendor that
//! answers whole gives the first audio after one short sentence's time; the rest is split as
//! [`split`] does.

/// Whether `text` holds something to speak: a letter or digit. Punctuation, symbols, emoji and
/// spaces (zero-width ones included) alone are read as silence by every engine, so every
/// entry point (Synthesize, CreateJob, voxctl's manifests) refuses them before a vendor call.
pub fn has_speech(text: &str) -> bool {
    text.chars().any(char::is_alphanumeric)
}

/// A vendor's per-request text limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TextLimit {
    /// At most this many Unicode scalar values (e.g. OpenAI: 4096).
    Chars(usize),
    /// At most this many UTF-8 bytes (e.g. Volcengine: 1024).
    Utf8Bytes(usize),
}

impl std::fmt::Display for TextLimit {
    /// For messages: `4096 characters`, `1024 UTF-8 bytes`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TextLimit::Chars(n) => write!(f, "{n} characters"),
            TextLimit::Utf8Bytes(n) => write!(f, "{n} UTF-8 bytes"),
        }
    }
}

/// Boundary strength, strongest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Paragraph,
    Sentence,
    Clause,
    Space,
}

const CJK_SENTENCE_END: &[char] = &['。', '！', '？', '｡'];
const LATIN_SENTENCE_END: &[char] = &['.', '!', '?', '…'];
const CLAUSE_END: &[char] = &['，', '、', '；', '：', ',', ';', ':', '—', '–'];
/// Characters that join the digits of one number (`0.6`, `08:30`, `22,1`, `1 000` with a no-break space).
const NUMBER_SEPARATORS: &[char] = &['.', ',', ':', '\'', '\u{00A0}', '\u{202F}', '，', '：'];
const CLOSERS: &[char] = &[
    '"', '\'', ')', ']', '}', '»', '›', '”', '’', '」', '』', '）', '】', '》', '〉',
];
/// Words (lower case, inner dots kept, final dot removed) after which a `.` does not end a
/// sentence.
const ABBREVIATIONS: &[&str] = &[
    "mr", "mrs", "ms", "dr", "st", "prof", "sr", "jr", "vs", "etc", "e.g", "i.e", "fig", "mt",
    "approx", "cf",
];

/// Splits `text` into consecutive chunks each within `limit` (see the module doc). Returns no
/// chunk for empty text and one chunk when the whole text fits.
pub fn split(text: &str, limit: TextLimit) -> Vec<&str> {
    let chars = Chars::of(text);
    let n = chars.len();
    let offset = |i: usize| chars.get(i).map_or(text.len(), |&(o, _)| o);
    let levels = boundary_levels(&chars);
    let mut chunks = Vec::new();
    let mut start = 0;
    while start < n {
        let max_end = max_end(&chars, start, limit);
        if max_end == n {
            chunks.push(&text[offset(start)..]);
            break;
        }
        let end = best_cut(&chars, &levels, start, max_end);
        chunks.push(&text[offset(start)..offset(end)]);
        start = end;
    }
    chunks
}

/// [`split`], except that the first chunk ends at the first sentence or paragraph end within
/// `first` (and within `limit`), taking the whitespace after it; without one there, it ends at
/// the best boundary within that bound, or holds the whole text when it fits. The concatenation
/// is still the input, every chunk non-empty and within `limit`.
pub fn split_short_first(text: &str, first: TextLimit, limit: TextLimit) -> Vec<&str> {
    let chars = Chars::of(text);
    let n = chars.len();
    if n == 0 {
        return Vec::new();
    }
    let bound = max_end(&chars, 0, first).min(max_end(&chars, 0, limit));
    let levels = boundary_levels(&chars);
    // The first sentence end after something to speak (a leading blank line is no sentence).
    let spoken_from = chars.iter().position(|&(_, c)| c.is_alphanumeric());
    let sentence_end = (1..=bound).find(|&p| {
        levels[p].is_some_and(|l| l <= Level::Sentence) && spoken_from.is_some_and(|s| s < p)
    });
    let end = match sentence_end {
        Some(mut p) => {
            while p < bound && chars[p].1.is_whitespace() {
                p += 1;
            }
            p
        }
        None if bound == n => n,
        None => best_cut(&chars, &levels, 0, bound),
    };
    let cut = chars.get(end).map_or(text.len(), |&(o, _)| o);
    let mut chunks = vec![&text[..cut]];
    chunks.extend(split(&text[cut..], limit));
    chunks
}

/// The text's characters with their byte offsets, and where extended grapheme clusters start.
struct Chars {
    chars: Vec<(usize, char)>,
    /// `cluster_start[p]`: a grapheme cluster starts at char `p` (true at `chars.len()`).
    cluster_start: Vec<bool>,
}

impl Chars {
    fn of(text: &str) -> Self {
        use unicode_segmentation::UnicodeSegmentation as _;
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        let mut cluster_start = vec![false; chars.len() + 1];
        let mut p = 0;
        for (byte, _) in text.grapheme_indices(true) {
            while chars[p].0 < byte {
                p += 1;
            }
            cluster_start[p] = true;
        }
        cluster_start[chars.len()] = true;
        Self {
            chars,
            cluster_start,
        }
    }
}

impl std::ops::Deref for Chars {
    type Target = [(usize, char)];

    fn deref(&self) -> &[(usize, char)] {
        &self.chars
    }
}

/// The farthest char index `e > start` such that `chars[start..e]` fits `limit` (at least one
/// char).
fn max_end(chars: &[(usize, char)], start: usize, limit: TextLimit) -> usize {
    let mut end = start;
    let mut used = 0usize;
    let (cap, bytes) = match limit {
        TextLimit::Chars(c) => (c.max(1), false),
        TextLimit::Utf8Bytes(b) => (b.max(1), true),
    };
    while let Some(&(_, c)) = chars.get(end) {
        let cost = if bytes { c.len_utf8() } else { 1 };
        if used + cost > cap && end > start {
            break;
        }
        used += cost;
        end += 1;
    }
    end
}

/// The cut in `(start, max_end]`: the last position of the strongest level present, else
/// the last position that is not inside an unsplittable pair, else `max_end`.
fn best_cut(chars: &Chars, levels: &[Option<Level>], start: usize, max_end: usize) -> usize {
    for wanted in [
        Level::Paragraph,
        Level::Sentence,
        Level::Clause,
        Level::Space,
    ] {
        if let Some(p) = (start + 1..=max_end)
            .rev()
            .find(|&p| levels[p].is_some_and(|l| l <= wanted))
        {
            return p;
        }
    }
    (start + 1..=max_end)
        .rev()
        .find(|&p| !unsplittable(chars, p))
        .unwrap_or(max_end)
}

/// True when cutting before `chars[p]` would land inside a grapheme cluster or inside a
/// number (`12`, `0.6`, `08:30`, `22,1`).
fn unsplittable(chars: &Chars, p: usize) -> bool {
    if !chars.cluster_start.get(p).copied().unwrap_or(true) {
        return true;
    }
    let at = |i: Option<usize>| i.and_then(|i| chars.get(i)).map(|&(_, c)| c);
    let digit = |i: Option<usize>| at(i).is_some_and(|c| c.is_ascii_digit());
    let separator = |i: Option<usize>| at(i).is_some_and(|c| NUMBER_SEPARATORS.contains(&c));
    (digit(p.checked_sub(1)) && digit(Some(p)))
        || (separator(p.checked_sub(1)) && digit(p.checked_sub(2)) && digit(Some(p)))
        || (digit(p.checked_sub(1)) && separator(Some(p)) && digit(Some(p + 1)))
}

/// `levels[p]` = the strongest boundary at position `p` (cut before `chars[p]`), for
/// `p` in `0..=chars.len()`.
fn boundary_levels(chars: &Chars) -> Vec<Option<Level>> {
    let n = chars.len();
    let mut levels = vec![None; n + 1];
    let mark = |p: usize, level: Level, levels: &mut Vec<Option<Level>>| {
        if p > 0 && p < n && !unsplittable(chars, p) && levels[p].is_none_or(|l| level < l) {
            levels[p] = Some(level);
        }
    };
    let skip = |mut j: usize, set: &dyn Fn(char) -> bool| {
        while chars.get(j).is_some_and(|&(_, c)| set(c)) {
            j += 1;
        }
        j
    };
    for (i, &(_, c)) in chars.iter().enumerate() {
        let level = if CJK_SENTENCE_END.contains(&c) || c == '\n' {
            Some(Level::Sentence)
        } else if LATIN_SENTENCE_END.contains(&c) {
            let j = skip(i + 1, &|c| CLOSERS.contains(&c));
            let spaced = chars.get(j).is_some_and(|&(_, c)| c.is_whitespace());
            (spaced && !(c == '.' && is_abbreviation(chars, i))).then_some(Level::Sentence)
        } else if CLAUSE_END.contains(&c) {
            Some(Level::Clause)
        } else {
            None
        };
        if c.is_whitespace() {
            mark(i + 1, Level::Space, &mut levels);
        }
        if c == '\n' {
            let end = skip(i + 1, &|c: char| c.is_whitespace() && c != '\n');
            if chars.get(end).is_some_and(|&(_, c)| c == '\n') {
                mark(
                    skip(end, &|c: char| c.is_whitespace()),
                    Level::Paragraph,
                    &mut levels,
                );
            }
        }
        if let Some(level) = level {
            let after = skip(i + 1, &|c| CLOSERS.contains(&c));
            mark(after, level, &mut levels);
            mark(
                skip(after, &|c: char| c.is_whitespace()),
                level,
                &mut levels,
            );
        }
    }
    levels
}

/// True when the `.` at `dot` ends an abbreviation or a single-letter initial.
fn is_abbreviation(chars: &[(usize, char)], dot: usize) -> bool {
    let mut w = dot;
    while w > 0 && chars[w - 1].1.is_alphabetic() || w > 0 && chars[w - 1].1 == '.' && w < dot {
        w -= 1;
    }
    let word: String = chars[w..dot]
        .iter()
        .map(|&(_, c)| c)
        .collect::<String>()
        .to_lowercase();
    let letters = word.chars().filter(|c| c.is_alphabetic()).count();
    ABBREVIATIONS.contains(&word.as_str()) || (letters == 1 && chars[w].1.is_uppercase())
}

#[cfg(test)]
#[path = "text_tests.rs"]
mod tests;
