//! The callback-data parser (`telegram::render::parse_callback_data`) on arbitrary
//! text, as a tap delivers it: data it accepts must be exactly what `callback_data`
//! produces for the parsed action and token.
#![no_main]

use hitl_telegram::telegram::render::{callback_data, parse_callback_data};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Some((action, token)) = parse_callback_data(text) {
        assert_eq!(callback_data(action, &token), text);
        assert!(
            text.len() <= 64,
            "Telegram allows 64 bytes of callback data"
        );
    }
});
