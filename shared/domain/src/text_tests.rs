//! Table and property tests of [`super::split`], and of [`super::has_speech`].

use proptest::prelude::*;

use super::TextLimit::{self, Chars, Utf8Bytes};
use super::{has_speech, split, split_short_first};

#[track_caller]
fn check(text: &str, limit: TextLimit, expected: &[&str]) {
    let got = split(text, limit);
    assert_eq!(got, expected, "split({text:?}, {limit:?})");
    assert_eq!(got.concat(), text);
}

#[test]
fn text_within_the_limit_stays_whole() {
    check(
        "Hello world. How are you?",
        Chars(100),
        &["Hello world. How are you?"],
    );
    check("", Chars(10), &[]);
}

#[test]
fn splits_at_latin_sentence_ends_keeping_the_space_with_the_sentence() {
    check(
        "One two. Three four. Five six.",
        Chars(21),
        &["One two. Three four. ", "Five six."],
    );
    check(
        "One two. Three four. Five six.",
        Chars(20),
        &["One two. Three four.", " Five six."],
    );
    check(
        "Is it? Yes! Good.",
        Chars(8),
        &["Is it? ", "Yes! ", "Good."],
    );
}

#[test]
fn closing_quotes_stay_with_their_sentence() {
    check(
        "He said \"stop.\" Then left.",
        Chars(18),
        &["He said \"stop.\" ", "Then left."],
    );
}

#[test]
fn splits_after_cjk_sentence_ends_without_a_space() {
    check(
        "你好。今天天气很好！我们走吧？好",
        Chars(8),
        &["你好。", "今天天气很好！", "我们走吧？好"],
    );
    check("「好。」他说。", Chars(5), &["「好。」", "他说。"]);
}

#[test]
fn newline_is_a_sentence_boundary() {
    check(
        "line one\nline two\nline three",
        Chars(19),
        &["line one\nline two\n", "line three"],
    );
    check("first\r\nsecond", Chars(7), &["first\r\n", "second"]);
}

#[test]
fn over_long_sentence_falls_back_to_clauses() {
    check(
        "alpha, beta, gamma, delta",
        Chars(14),
        &["alpha, beta, ", "gamma, delta"],
    );
    check(
        "一二三，四五六、七八九",
        Chars(5),
        &["一二三，", "四五六、", "七八九"],
    );
    check(
        "first; second: third",
        Chars(10),
        &["first; ", "second: ", "third"],
    );
}

#[test]
fn over_long_clause_falls_back_to_whitespace() {
    check("aaa bbb ccc ddd", Chars(9), &["aaa bbb ", "ccc ddd"]);
}

#[test]
fn word_longer_than_the_limit_is_cut_at_a_char_boundary() {
    check("abcdefghij", Chars(4), &["abcd", "efgh", "ij"]);
    check(
        "日本語のテキスト",
        Utf8Bytes(7),
        &["日本", "語の", "テキ", "スト"],
    );
}

#[test]
fn never_cuts_inside_a_utf8_character() {
    for chunk in split("ééééé", Utf8Bytes(3)) {
        assert_eq!(chunk, "é");
    }
    assert_eq!(
        split("😀", Utf8Bytes(2)),
        ["😀"],
        "one character even over a tiny limit"
    );
}

#[test]
fn never_cuts_inside_numbers() {
    check("pay 0.6 now", Chars(6), &["pay ", "0.6 ", "now"]);
    check("at 08:30 ok", Chars(7), &["at ", "08:30 ", "ok"]);
    check("it was 22,1 then", Chars(11), &["it was ", "22,1 then"]);
    check("x 3.14159", Chars(5), &["x ", "3.141", "59"]);
}

#[test]
fn abbreviations_do_not_end_sentences() {
    check(
        "Mr. Smith met Dr. Who. Then they left.",
        Chars(30),
        &["Mr. Smith met Dr. Who. ", "Then they left."],
    );
    check(
        "Use e.g. tea, i.e. a drink. Done.",
        Chars(28),
        &["Use e.g. tea, i.e. a drink. ", "Done."],
    );
    check(
        "Bring pens etc. and paper. Ok.",
        Chars(27),
        &["Bring pens etc. and paper. ", "Ok."],
    );
    check(
        "Cats vs. dogs today. Yes.",
        Chars(21),
        &["Cats vs. dogs today. ", "Yes."],
    );
    check(
        "Visit St. Ives now. Go.",
        Chars(20),
        &["Visit St. Ives now. ", "Go."],
    );
    check(
        "Ask Mrs. Jones now. Go.",
        Chars(20),
        &["Ask Mrs. Jones now. ", "Go."],
    );
}

#[test]
fn combining_marks_stay_with_their_base() {
    check("cafe\u{301}s", Chars(4), &["caf", "e\u{301}s"]);
}

#[test]
fn byte_limit_counts_utf8_bytes() {
    let text = "Grüße. Tschüß.";
    let chunks = split(text, Utf8Bytes(9));
    assert_eq!(chunks, ["Grüße. ", "Tschüß."]);
}

fn text_strategy() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "a", "b", "Z", "1", "0", " ", "  ", "\n", "\r\n", "\t", ".", "!", "?", ",", ";", ":", "。",
        "，", "、", "！", "é", "中", "😀", "e\u{301}", "\"", "Mr.", "0.6", "08:30", "22,1", "…",
        "—",
    ]);
    prop::collection::vec(pieces, 0..120).prop_map(|v| v.concat())
}

fn limit_strategy() -> impl Strategy<Value = TextLimit> {
    prop_oneof![
        (1usize..40).prop_map(Chars),
        (4usize..60).prop_map(Utf8Bytes)
    ]
}

proptest! {
    #[test]
    fn chunks_concatenate_to_the_input_and_fit_the_limit(text in text_strategy(), limit in limit_strategy()) {
        let chunks = split(&text, limit);
        prop_assert_eq!(chunks.concat(), text.clone());
        for chunk in &chunks {
            prop_assert!(!chunk.is_empty());
            match limit {
                Chars(n) => prop_assert!(chunk.chars().count() <= n, "{:?} over {} chars", chunk, n),
                Utf8Bytes(n) => prop_assert!(chunk.len() <= n, "{:?} over {} bytes", chunk, n),
            }
        }
    }

    #[test]
    fn cuts_never_separate_two_digits_when_the_limit_allows(words in prop::collection::vec("[a-z]{1,5}|[0-9]{1,4}([.,:][0-9]{1,3})?", 1..40)) {
        let text = words.join(" ");
        for chunk in split(&text, Chars(12)).windows(2) {
            let (a, b) = (chunk[0], chunk[1]);
            let last = a.chars().last();
            let first = b.chars().next();
            prop_assert!(!(last.is_some_and(|c| c.is_ascii_digit()) && first.is_some_and(|c| c.is_ascii_digit())), "{:?} | {:?}", a, b);
        }
    }
}

// Behaviour voxctl relied on when it had its own splitter (its items are split with this one).

fn parts(text: &str, max: usize) -> Vec<&str> {
    let parts = split(text, Chars(max));
    assert_eq!(parts.concat(), text, "parts must concatenate to the input");
    for p in &parts {
        assert!(p.chars().count() <= max, "part over {max}: {p:?}");
        assert!(!p.is_empty());
    }
    parts
}

#[test]
fn paragraph_boundaries_are_preferred_over_sentence_ends() {
    let text = "One. Two. Three.\n\nFour. Five. Six.";
    assert_eq!(
        parts(text, 20),
        ["One. Two. Three.\n\n", "Four. Five. Six."]
    );
    // Even when a sentence end comes later inside the limit.
    let text = "One.\n\nTwo. Three. Four.";
    assert_eq!(parts(text, 19), ["One.\n\n", "Two. Three. Four."]);
}

#[test]
fn a_long_paragraph_is_cut_at_sentence_ends() {
    let text = "First sentence here. Second one is here! Third? Yes.";
    assert_eq!(
        parts(text, 25),
        [
            "First sentence here. ",
            "Second one is here! ",
            "Third? Yes."
        ]
    );
}

#[test]
fn dots_inside_numbers_do_not_end_a_sentence() {
    assert_eq!(
        parts("Version 1.5 is out. Go.", 21),
        ["Version 1.5 is out. ", "Go."]
    );
}

#[test]
fn full_width_terminators_end_sentences_without_spaces() {
    let text = "你好。今天天气很好！我们出去吧？";
    assert_eq!(parts(text, 7), ["你好。", "今天天气很好！", "我们出去吧？"]);
}

#[test]
fn a_sentence_without_punctuation_is_cut_between_words_then_inside_a_word() {
    assert_eq!(
        parts("aaaa bbbb cccc dddddddddd", 6),
        ["aaaa ", "bbbb ", "cccc ", "dddddd", "dddd"]
    );
}

#[test]
fn grapheme_clusters_are_never_cut() {
    // e + combining acute, a family emoji (ZWJ sequence), a flag: each one cluster.
    for cluster in ["e\u{301}", "👨\u{200D}👩\u{200D}👧", "🇫🇷", "\r\n", "👍🏽"] {
        let text = format!("ab{cluster}cd");
        let n = cluster.chars().count();
        for max in 1..=(n + 3) {
            for part in split(&text, Chars(max.max(n))) {
                assert!(
                    !part.starts_with(|c: char| cluster.chars().skip(1).any(|x| x == c)),
                    "a part starts inside {cluster:?}: {part:?}"
                );
            }
        }
    }
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
        parts(&text, max);
    }
}

#[test]
fn speech_needs_a_letter_or_digit() {
    for silent in ["", "  \n", "\u{200b}\u{200b}", "...!?", "🙂🙂", "—"] {
        assert!(!has_speech(silent), "{silent:?}");
    }
    for spoken in ["a", "7", "你好", "¡Hola!", "\u{200b}x"] {
        assert!(has_speech(spoken), "{spoken:?}");
    }
}

#[test]
fn a_short_first_chunk_ends_at_the_first_sentence_and_the_rest_splits_as_usual() {
    let text = "Hi there. This is the second sentence. And a third one here.";
    let chunks = split_short_first(text, Chars(100), Chars(30));
    assert_eq!(chunks[0], "Hi there. ");
    assert_eq!(chunks.concat(), text);
    assert_eq!(chunks[1..], split(&text[10..], Chars(30))[..]);
    assert_eq!(
        split_short_first("你好。今天天气很好。", Chars(100), Chars(300)),
        ["你好。", "今天天气很好。"]
    );
}

#[test]
fn a_short_first_chunk_is_bounded_and_a_text_without_a_sentence_end_stays_whole() {
    let long = "one two three four five six seven eight nine ten. Next.";
    let chunks = split_short_first(long, Chars(20), Chars(300));
    assert_eq!(chunks[0], "one two three four ");
    assert_eq!(chunks.concat(), long);
    assert_eq!(
        split_short_first("just one sentence", Chars(100), Chars(300)),
        ["just one sentence"]
    );
    assert!(split_short_first("", Chars(100), Chars(300)).is_empty());
    assert_eq!(
        split_short_first("\n\nHi. More here.", Chars(100), Chars(300)),
        ["\n\nHi. ", "More here."],
        "a leading blank line is not the first sentence"
    );
    let bytes = split_short_first("Été. Encore.", Utf8Bytes(4), Chars(300));
    assert!(bytes[0].len() <= 4, "{bytes:?}");
    assert_eq!(bytes.concat(), "Été. Encore.");
}

proptest! {
    #[test]
    fn short_first_chunks_rebuild_the_text_and_respect_the_limit(text in "[a-z .!?,\n]{0,200}", limit in 5usize..60) {
        let chunks = split_short_first(&text, Chars(40), Chars(limit));
        prop_assert_eq!(chunks.concat(), text.clone());
        for c in &chunks {
            prop_assert!(!c.is_empty());
            prop_assert!(c.chars().count() <= limit);
        }
    }
}
