use super::*;

#[test]
fn most_vendors_bill_unicode_scalars_whatever_the_script() {
    // ElevenLabs: "Text-to-speech costs one credit per character of input text"
    // (https://elevenlabs.io/docs/overview/intro). OpenAI, Volcengine, MiniMax: no finer
    // published rule, so scalars (docs/VENDORS.md#billing).
    for provider in [
        Provider::ElevenLabs,
        Provider::OpenAi,
        Provider::Volcengine,
        Provider::MiniMax,
        Provider::SelfHosted,
        Provider::Espeak,
    ] {
        assert_eq!(billable_characters(provider, "Hello, world"), 12);
        assert_eq!(billable_characters(provider, "你好，世界"), 5);
        assert_eq!(billable_characters(provider, "こんにちは"), 5);
        // Markup is text to these vendors: every character of it counts.
        assert_eq!(billable_characters(provider, "<speak>hi</speak>"), 17);
    }
}

#[test]
fn emoji_count_their_scalars_not_utf16_units_or_graphemes() {
    // One scalar outside the BMP (two UTF-16 code units): 1.
    assert_eq!(billable_characters(Provider::ElevenLabs, "😀"), 1);
    // A ZWJ family: man, ZWJ, woman, ZWJ, girl = 5 scalars in one grapheme.
    assert_eq!(
        billable_characters(
            Provider::OpenAi,
            "\u{1F468}\u{200D}\u{1F469}\u{200D}\u{1F467}"
        ),
        5
    );
    // A flag is two regional indicators.
    assert_eq!(billable_characters(Provider::MiniMax, "🇯🇵"), 2);
    // Azure: "Every code point defined in Unicode" (text-to-speech#pricing-note).
    assert_eq!(billable_characters(Provider::Azure, "😀!"), 2);
    // DashScope counts an emoji as one character (help.aliyun.com/zh/ccs/billing-rules:
    // 一个 emoji 计为 1 个字符).
    assert_eq!(billable_characters(Provider::DashScope, "😀"), 1);
}

#[test]
fn azure_counts_han_twice_and_markup_but_not_speak_or_voice() {
    // https://learn.microsoft.com/azure/ai-services/speech-service/text-to-speech#pricing-note:
    // "Each Chinese character is counted as two characters for billing, including kanji used
    // in Japanese, hanja used in Korean"; markup is billed "except for <speak> and <voice>
    // tags".
    assert_eq!(billable_characters(Provider::Azure, "你好"), 4);
    // Kanji twice, kana once: 日本 (2×2) + は (1) = 5.
    assert_eq!(billable_characters(Provider::Azure, "日本は"), 5);
    // Hangul is not hanja: once each.
    assert_eq!(billable_characters(Provider::Azure, "안녕"), 2);
    // A CJK Extension B ideograph (outside the BMP) is still Han.
    assert_eq!(billable_characters(Provider::Azure, "\u{20BB7}"), 2);
    let ssml = r#"<speak version="1.0"><voice name="zh-CN-XiaoxiaoNeural"><prosody pitch="+5%">你好</prosody></voice></speak>"#;
    let prosody = r#"<prosody pitch="+5%">"#.chars().count() + "</prosody>".len();
    assert_eq!(
        billable_characters(Provider::Azure, ssml),
        (prosody + 4) as u64
    );
}

#[test]
fn dashscope_counts_han_twice_and_no_ssml_tags() {
    // https://help.aliyun.com/zh/model-studio/cosyvoice-java-api (字符计算规则): 汉字（包括
    // 简/繁体汉字、日文汉字和韩文汉字）按2个字符计算，其他所有字符均按1个字符计算；计算
    // 文本长度时，不包含SSML标签内容. Its own examples:
    assert_eq!(billable_characters(Provider::DashScope, "你好"), 4);
    assert_eq!(billable_characters(Provider::DashScope, "中A文123"), 8);
    assert_eq!(billable_characters(Provider::DashScope, "中文。"), 5);
    assert_eq!(billable_characters(Provider::DashScope, "中 文。"), 6);
    assert_eq!(
        billable_characters(Provider::DashScope, "<speak>你好</speak>"),
        4
    );
    assert_eq!(
        billable_characters(
            Provider::DashScope,
            r#"<speak rate="2"><break time="500ms"/>好</speak>"#
        ),
        2
    );
    // A `<` that opens no tag is text.
    assert_eq!(billable_characters(Provider::DashScope, "1 < 2"), 5);
}

#[test]
fn events_round_trip_as_json_with_their_kind() {
    let context = UsageContext {
        record_id: "r".into(),
        request_id: String::new(),
        tenant: "t".into(),
        caller: "token:a".into(),
        path: "grpc".into(),
        pack_id: String::new(),
        snapshot_digest: String::new(),
        tier: None,
        pool: "p".into(),
        provider: Provider::OpenAi,
        currency: "USD".into(),
        at_ms: 1,
    };
    let event = UsageEvent::Done {
        context,
        done: DoneUsage {
            cached_characters: 3,
            audio_ms: 10,
            cached_cost_micros: 0,
            failed_attempts: 0,
            ok: true,
        },
    };
    let json = serde_json::to_string(&event).unwrap();
    assert!(json.contains(r#""kind":"done""#), "{json}");
    assert_eq!(serde_json::from_str::<UsageEvent>(&json).unwrap(), event);
}
