//! Injected time. The brain never reads a clock: every call carries `now`.

use std::fmt;
use std::ops::{Add, Sub};

/// A point in time, in milliseconds since an origin chosen by the caller (monotonic).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Time(u64);

/// A span of time in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Span(u64);

impl Time {
    /// The origin.
    pub const ZERO: Time = Time(0);

    /// A time `ms` milliseconds after the origin.
    pub const fn from_ms(ms: u64) -> Self {
        Time(ms)
    }

    /// A time `s` seconds after the origin.
    pub const fn from_secs(s: u64) -> Self {
        Time(s * 1000)
    }

    /// Milliseconds since the origin.
    pub const fn as_ms(self) -> u64 {
        self.0
    }

    /// Seconds since the origin.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }

    /// The span from `earlier` to `self`, zero if `earlier` is later.
    pub fn since(self, earlier: Time) -> Span {
        Span(self.0.saturating_sub(earlier.0))
    }
}

impl Span {
    /// No time.
    pub const ZERO: Span = Span(0);

    /// A span of `ms` milliseconds.
    pub const fn from_ms(ms: u64) -> Self {
        Span(ms)
    }

    /// A span of `s` seconds.
    pub const fn from_secs(s: u64) -> Self {
        Span(s * 1000)
    }

    /// Milliseconds in the span.
    pub const fn as_ms(self) -> u64 {
        self.0
    }

    /// Seconds in the span.
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

impl Add<Span> for Time {
    type Output = Time;
    fn add(self, rhs: Span) -> Time {
        Time(self.0.saturating_add(rhs.0))
    }
}

impl Add for Span {
    type Output = Span;
    fn add(self, rhs: Span) -> Span {
        Span(self.0.saturating_add(rhs.0))
    }
}

impl Sub for Time {
    type Output = Span;
    fn sub(self, rhs: Time) -> Span {
        self.since(rhs)
    }
}

impl fmt::Display for Time {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:.1}s", self.as_secs_f64())
    }
}
