//! What the check found: lines for people, and the same as JSON with the
//! details each part gathered.

use serde_json::{json, Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Ok,
    Warn,
    Fail,
}

impl Level {
    fn word(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        }
    }
}

#[derive(Debug)]
struct Finding {
    level: Level,
    topic: String,
    text: String,
}

#[derive(Debug, Default)]
pub struct Report {
    findings: Vec<Finding>,
    /// Details by part (`project`, `apps`, `uploads`, `state`, `pool`).
    details: Map<String, Value>,
}

impl Report {
    pub fn add(&mut self, level: Level, topic: &str, text: String) {
        self.findings.push(Finding { level, topic: topic.to_string(), text });
    }

    pub fn detail(&mut self, part: &str, value: Value) {
        self.details.insert(part.to_string(), value);
    }

    /// Whether anything was reported on `topic`.
    pub fn has(&self, topic: &str) -> bool {
        self.findings.iter().any(|f| f.topic == topic)
    }

    pub fn failed(&self) -> bool {
        self.findings.iter().any(|f| f.level == Level::Fail)
    }

    fn count(&self, level: Level) -> usize {
        self.findings.iter().filter(|f| f.level == level).count()
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        for f in &self.findings {
            out.push_str(&format!("{:<4} {}: {}\n", f.level.word(), f.topic, f.text));
        }
        out.push_str(&format!(
            "{}: {} ok, {} warning(s), {} failed\n",
            if self.failed() { "FAILED" } else { "passed" },
            self.count(Level::Ok),
            self.count(Level::Warn),
            self.count(Level::Fail)
        ));
        out
    }

    pub fn json(&self) -> String {
        let checks: Vec<Value> =
            self.findings.iter().map(|f| json!({ "status": f.level.word().to_lowercase(), "topic": f.topic, "message": f.text })).collect();
        let mut doc = Map::new();
        doc.insert("ok".into(), Value::Bool(!self.failed()));
        doc.insert("checks".into(), Value::Array(checks));
        doc.extend(self.details.clone());
        Value::Object(doc).to_string()
    }
}
