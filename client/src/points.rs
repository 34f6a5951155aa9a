//! Points with typed payloads: serde structs in, serde structs out.

use cairn_api::{Payload, PointId, PointStruct, Record, ScoredPoint, VectorInput};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::error::{Error, Result};

/// A point to upsert: an id, a vector and an optional payload.
///
/// ```
/// # fn demo() -> Result<(), cairn_client::Error> {
/// #[derive(serde::Serialize)]
/// struct Movie { title: String, year: u16 }
///
/// let point = cairn_client::Point::new(42, vec![0.1, 0.2, 0.3])
///     .payload(&Movie { title: "Alien".into(), year: 1979 })?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Point(PointStruct);

impl Point {
    /// A point without payload.
    pub fn new(id: impl Into<PointId>, vector: impl Into<Vec<f32>>) -> Self {
        Self(PointStruct {
            id: id.into(),
            vector: VectorInput::Dense(vector.into()),
            payload: None,
        })
    }

    /// Attaches a payload from any value that serialises to a JSON object.
    pub fn payload<T: Serialize + ?Sized>(mut self, payload: &T) -> Result<Self> {
        self.0.payload = Some(to_payload(payload)?);
        Ok(self)
    }

    /// Attaches a payload given as a JSON object.
    pub fn payload_json(mut self, payload: Payload) -> Self {
        self.0.payload = Some(payload);
        self
    }

    /// The point's id.
    pub fn id(&self) -> PointId {
        self.0.id
    }
}

impl From<Point> for PointStruct {
    fn from(p: Point) -> Self {
        p.0
    }
}

/// Serialises a value into a payload object.
pub fn to_payload<T: Serialize + ?Sized>(value: &T) -> Result<Payload> {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        Ok(other) => Err(Error::InvalidArgument(format!(
            "a payload must serialise to a JSON object, got {}",
            kind_of(&other)
        ))),
        Err(e) => Err(Error::InvalidArgument(format!(
            "payload cannot be serialised: {e}"
        ))),
    }
}

fn kind_of(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Reads a returned point's payload into a user type.
///
/// ```
/// use cairn_client::PayloadExt;
/// # fn demo(hit: cairn_client::api::ScoredPoint) -> Result<(), cairn_client::Error> {
/// #[derive(serde::Deserialize)]
/// struct Movie { title: String }
///
/// let movie: Movie = hit.payload_as()?;
/// # Ok(()) }
/// ```
pub trait PayloadExt {
    /// The payload, deserialised; an error when it was not returned or does not fit `T`.
    fn payload_as<T: DeserializeOwned>(&self) -> Result<T>;
}

fn decode<T: DeserializeOwned>(id: &PointId, payload: Option<&Payload>) -> Result<T> {
    let payload = payload.ok_or_else(|| {
        Error::InvalidArgument(format!(
            "point {id} came back without a payload; ask for it with with_payload(true)"
        ))
    })?;
    T::deserialize(serde_json::Value::Object(payload.clone())).map_err(|e| {
        Error::InvalidArgument(format!(
            "payload of point {id} does not fit the requested type: {e}"
        ))
    })
}

impl PayloadExt for ScoredPoint {
    fn payload_as<T: DeserializeOwned>(&self) -> Result<T> {
        decode(&self.id, self.payload.as_ref())
    }
}

impl PayloadExt for Record {
    fn payload_as<T: DeserializeOwned>(&self) -> Result<T> {
        decode(&self.id, self.payload.as_ref())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Movie {
        title: String,
        year: u16,
    }

    #[test]
    fn typed_payloads_round_trip() {
        let movie = Movie {
            title: "Alien".into(),
            year: 1979,
        };
        let point: PointStruct = Point::new(7, vec![1.0]).payload(&movie).unwrap().into();
        let record = Record {
            id: point.id,
            payload: point.payload,
            vector: None,
            order_value: None,
        };
        assert_eq!(record.payload_as::<Movie>().unwrap(), movie);
    }

    #[test]
    fn payloads_that_are_not_objects_are_refused() {
        let err = Point::new(1, vec![1.0]).payload(&[1, 2]).unwrap_err();
        assert!(err.to_string().contains("got an array"), "{err}");
        let record = Record {
            id: PointId::Num(3),
            payload: None,
            vector: None,
            order_value: None,
        };
        let err = record.payload_as::<Movie>().unwrap_err();
        assert!(err.to_string().contains("with_payload(true)"), "{err}");
    }
}
