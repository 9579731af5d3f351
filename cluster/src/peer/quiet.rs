//! Warnings a misconfigured peer would repeat on every dial: every 100 ms
//! on the data path (`REDIAL_AFTER`), every 2 s on the control loop, and
//! once per dial at the other end. The first is a warning an operator
//! must see; the same text again within `EVERY` goes to debug.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often one text may be warned.
const EVERY: Duration = Duration::from_secs(60);
/// Texts remembered at once: a node sees few distinct misconfigurations,
/// and past this the oldest are forgotten (and may warn again early).
const MAX_TEXTS: usize = 256;

static SEEN: Mutex<Option<HashMap<String, Instant>>> = Mutex::new(None);

/// Whether `text` should be warned now (and remembers that it was).
pub(crate) fn due(text: &str) -> bool {
    due_at(&SEEN, text, Instant::now())
}

fn due_at(seen: &Mutex<Option<HashMap<String, Instant>>>, text: &str, now: Instant) -> bool {
    let mut guard = seen.lock().unwrap_or_else(|e| e.into_inner());
    let seen = guard.get_or_insert_with(HashMap::new);
    if seen.get(text).is_some_and(|&at| now.duration_since(at) < EVERY) {
        return false;
    }
    if seen.len() >= MAX_TEXTS {
        seen.retain(|_, at| now.duration_since(*at) < EVERY);
        if seen.len() >= MAX_TEXTS {
            seen.clear();
        }
    }
    seen.insert(text.to_string(), now);
    true
}

/// `text` fit for a log line when it comes from a peer that has proved
/// nothing: control characters replaced (no forged lines or terminal
/// escapes) and at most `MAX_CHARS` kept.
pub(crate) fn printable(text: &str) -> String {
    const MAX_CHARS: usize = 300;
    let mut out: String =
        text.chars().take(MAX_CHARS).map(|c| if c.is_control() { '\u{fffd}' } else { c }).collect();
    if text.chars().nth(MAX_CHARS).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_warns_once_a_minute_and_others_are_not_held_back() {
        let seen = Mutex::new(None);
        let t0 = Instant::now();
        assert!(due_at(&seen, "a", t0));
        assert!(!due_at(&seen, "a", t0 + Duration::from_secs(1)));
        assert!(due_at(&seen, "b", t0 + Duration::from_secs(1)), "another text is its own");
        assert!(!due_at(&seen, "a", t0 + EVERY - Duration::from_millis(1)));
        assert!(due_at(&seen, "a", t0 + EVERY));
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let seen = Mutex::new(None);
        let t0 = Instant::now();
        for i in 0..3 * MAX_TEXTS {
            assert!(due_at(&seen, &format!("text {i}"), t0));
            let len = seen.lock().unwrap().as_ref().map_or(0, HashMap::len);
            assert!(len <= MAX_TEXTS, "{len}");
        }
    }

    #[test]
    fn a_peers_words_cannot_forge_lines_or_run_on() {
        assert_eq!(printable("ok: node 4 has 6 shards"), "ok: node 4 has 6 shards");
        assert_eq!(printable("a\nWARN forged\x1b[31m"), "a\u{fffd}WARN forged\u{fffd}[31m");
        let long = "x".repeat(10_000);
        assert_eq!(printable(&long).chars().count(), 301);
    }
}
