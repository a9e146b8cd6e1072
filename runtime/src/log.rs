//! One-line logs on stderr: `gapura: <time> <message>`. Nothing from a
//! request's bytes is logged.

use std::time::{SystemTime, UNIX_EPOCH};

pub fn stamp() -> String {
    let d = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let line = gapura_http::server::date::format_date_line(d.as_secs());
    // "Date: Mon, 30 Nov 2026 05:00:00 GMT\r\n" -> "30 Nov 2026 05:00:00.123"
    let text = String::from_utf8_lossy(&line[11..31]).into_owned();
    format!("{text}.{:03}", d.subsec_millis())
}

#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {{
        eprintln!("gapura: {} {}", $crate::log::stamp(), format_args!($($arg)*));
    }};
}
