//! The simulated clock: seconds since the epoch, running `time_scale` times
//! faster than the real one, and never going backwards across restarts
//! (mod_time semantics depend on it).

use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

#[derive(Debug)]
pub struct Clock {
    start: Instant,
    base: f64,
    scale: f64,
    /// Extra seconds added by the introspection endpoint.
    offset: Mutex<f64>,
}

/// The real wall clock, seconds since the epoch.
pub fn wall_now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
}

impl Clock {
    /// Starts at the later of the real time and `not_before` (the sim time
    /// persisted by a previous run on the same directory).
    pub fn new(scale: f64, not_before: f64) -> Self {
        Clock { start: Instant::now(), base: wall_now().max(not_before), scale, offset: Mutex::new(0.0) }
    }

    /// Sim seconds since the epoch.
    pub fn now(&self) -> f64 {
        let off = *self.offset.lock().unwrap_or_else(|e| e.into_inner());
        self.base + self.start.elapsed().as_secs_f64() * self.scale + off
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Jumps the clock forward (negative values are ignored).
    pub fn advance(&self, secs: f64) {
        if secs.is_finite() && secs > 0.0 {
            *self.offset.lock().unwrap_or_else(|e| e.into_inner()) += secs;
        }
    }
}
