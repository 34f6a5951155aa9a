//! Datetimes in filters: `{"key": "created", "range": {"gte": "2024-01-01T00:00:00Z"}}`.
//!
//! Qdrant reads a payload string as a datetime when a range's bounds are strings, and compares
//! instants to the microsecond. Its parser accepts RFC 3339 and a few looser spellings that
//! clients send (a space for the `T`, no seconds, no time, no zone: UTC is assumed); Cairn
//! accepts the same ones, so a payload value and a bound that Qdrant reads alike compare alike
//! here.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, NaiveDate, NaiveDateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An instant, in microseconds since the Unix epoch (UTC), as Qdrant keeps datetimes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Datetime(i64);

/// A string that is not a datetime in any accepted spelling.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a datetime: expected RFC 3339 such as 2024-01-01T00:00:00Z (a space for the \
     T, no seconds, no time and no zone, meaning UTC, are accepted too)"
)]
pub struct NotADatetime(String);

impl Datetime {
    /// Microseconds since the Unix epoch.
    pub fn micros(self) -> i64 {
        self.0
    }

    /// The instant `micros` microseconds after the Unix epoch.
    pub fn from_micros(micros: i64) -> Self {
        Self(micros)
    }
}

impl FromStr for Datetime {
    type Err = NotADatetime;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let zoned = DateTime::parse_from_rfc3339(s)
            .or_else(|_| DateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f%#z"))
            .or_else(|_| DateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f%#z"))
            .map(|t| t.with_timezone(&Utc));
        let instant = zoned.or_else(|_| {
            NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S%.f")
                .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f"))
                .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M"))
                .or_else(|_| NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M"))
                .or_else(|_| {
                    NaiveDate::parse_from_str(s, "%Y-%m-%d").map(|d| d.and_time(Default::default()))
                })
                .map(|t| t.and_utc())
        });
        instant
            .map(|t| Self(t.timestamp_micros()))
            .map_err(|_| NotADatetime(s.to_owned()))
    }
}

impl fmt::Display for Datetime {
    /// RFC 3339 in UTC with as many fractional digits as the instant needs, so it parses back
    /// to the same microsecond.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match DateTime::<Utc>::from_timestamp_micros(self.0) {
            Some(t) => f.write_str(&t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
            // Beyond chrono's years ±262,143: no string parses to it, so none is written.
            None => write!(f, "{}µs", self.0),
        }
    }
}

impl Serialize for Datetime {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Datetime {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = std::borrow::Cow::<'de, str>::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// Datetime bounds; absent bounds are open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DatetimeRange {
    /// Later than.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub gt: Option<Datetime>,
    /// At or later than.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub gte: Option<Datetime>,
    /// Earlier than.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub lt: Option<Datetime>,
    /// At or earlier than.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub lte: Option<Datetime>,
}

impl DatetimeRange {
    /// Whether `t` is within the bounds.
    pub fn holds(&self, t: Datetime) -> bool {
        crate::filter::within([self.gt, self.gte, self.lt, self.lte], t)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn qdrant_spellings_parse_to_the_same_microsecond() {
        let t = |s: &str| s.parse::<Datetime>().unwrap().micros();
        let base = 1_675_853_340_000_000; // 2023-02-08T10:49:00Z
        for s in [
            "2023-02-08T10:49:00Z",
            "2023-02-08T11:49:00+01:00",
            "2023-02-08T11:49:00+0100",
            "2023-02-08 11:49:00+01:00",
            "2023-02-08T10:49:00",
            "2023-02-08 10:49:00",
            "2023-02-08T10:49",
            "2023-02-08 10:49",
        ] {
            assert_eq!(t(s), base, "{s}");
        }
        assert_eq!(t("2023-02-08T10:49:00.000123Z"), base + 123);
        assert_eq!(t("2023-02-08"), base - (10 * 3600 + 49 * 60) * 1_000_000);
        for bad in [
            "",
            "yesterday",
            "2023-13-01",
            "2023-02-08T25:00:00Z",
            "1675853340",
        ] {
            let err = bad.parse::<Datetime>().unwrap_err().to_string();
            assert!(err.contains("is not a datetime"), "{bad}: {err}");
        }
    }

    #[test]
    fn written_form_parses_back() {
        for s in [
            "2023-02-08T10:49:00.000123Z",
            "1969-07-20T20:17:40Z",
            "2023-02-08",
        ] {
            let t: Datetime = s.parse().unwrap();
            let wire = serde_json::to_string(&t).unwrap();
            assert_eq!(
                serde_json::from_str::<Datetime>(&wire).unwrap(),
                t,
                "{wire}"
            );
        }
        let r: DatetimeRange =
            serde_json::from_str(r#"{"gte": "2023-02-08", "lt": "2023-02-09T00:00:00Z"}"#).unwrap();
        assert!(r.holds("2023-02-08T23:59:59.999999Z".parse().unwrap()));
        assert!(!r.holds("2023-02-09T00:00:00Z".parse().unwrap()));
        assert!(!r.holds("2023-02-07T23:59:59Z".parse().unwrap()));
    }
}
