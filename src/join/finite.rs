//! Whether every number a value holds is finite: a serializer that visits
//! the whole value and writes nothing, failing at the first float that is
//! NaN or infinite. A state restored with one would export it, and every
//! sum it goes into, for good.

use serde::ser::{self, Serialize};
use std::fmt;

/// Whether every float `value` serializes is finite.
pub fn all_finite<T: Serialize + ?Sized>(value: &T) -> bool {
    value.serialize(Finite).is_ok()
}

/// The serializer of [`all_finite`].
struct Finite;

/// A float that is NaN or infinite, or a custom error of a value's own.
#[derive(Debug)]
struct NotFinite;

impl fmt::Display for NotFinite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number that is not finite")
    }
}

impl std::error::Error for NotFinite {}

impl ser::Error for NotFinite {
    fn custom<M: fmt::Display>(_: M) -> Self {
        NotFinite
    }
}

type Done = Result<(), NotFinite>;

/// Passes over a value that holds no float.
macro_rules! no_float {
    ($($method:ident($($type:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $type),*) -> Done { Ok(()) })*
    };
}

/// Starts a compound value, whose parts are visited in turn.
macro_rules! compound {
    ($($method:ident($($type:ty),*)),* $(,)?) => {
        $(fn $method(self, $(_: $type),*) -> Result<Self, NotFinite> { Ok(self) })*
    };
}

impl ser::Serializer for Finite {
    type Ok = ();
    type Error = NotFinite;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    no_float!(
        serialize_bool(bool),
        serialize_i8(i8),
        serialize_i16(i16),
        serialize_i32(i32),
        serialize_i64(i64),
        serialize_i128(i128),
        serialize_u8(u8),
        serialize_u16(u16),
        serialize_u32(u32),
        serialize_u64(u64),
        serialize_u128(u128),
        serialize_char(char),
        serialize_str(&str),
        serialize_bytes(&[u8]),
        serialize_none(),
        serialize_unit(),
        serialize_unit_struct(&'static str),
        serialize_unit_variant(&'static str, u32, &'static str),
    );

    compound!(
        serialize_seq(Option<usize>),
        serialize_tuple(usize),
        serialize_tuple_struct(&'static str, usize),
        serialize_tuple_variant(&'static str, u32, &'static str, usize),
        serialize_map(Option<usize>),
        serialize_struct(&'static str, usize),
        serialize_struct_variant(&'static str, u32, &'static str, usize),
    );

    fn serialize_f32(self, v: f32) -> Done {
        v.is_finite().then_some(()).ok_or(NotFinite)
    }

    fn serialize_f64(self, v: f64) -> Done {
        v.is_finite().then_some(()).ok_or(NotFinite)
    }

    fn serialize_some<T: Serialize + ?Sized>(self, value: &T) -> Done {
        value.serialize(self)
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(self, _: &'static str, value: &T) -> Done {
        value.serialize(self)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        value: &T,
    ) -> Done {
        value.serialize(self)
    }
}

/// The parts of compound values, each visited in turn.
macro_rules! parts {
    ($($trait:ident :: $method:ident($($name:ident),*)),* $(,)?) => {
        $(impl ser::$trait for Finite {
            type Ok = ();
            type Error = NotFinite;

            fn $method<T: Serialize + ?Sized>(&mut self, $($name: &'static str,)* value: &T) -> Done {
                $(let _ = $name;)*
                value.serialize(Finite)
            }

            fn end(self) -> Done {
                Ok(())
            }
        })*
    };
}

parts!(
    SerializeSeq::serialize_element(),
    SerializeTuple::serialize_element(),
    SerializeTupleStruct::serialize_field(),
    SerializeTupleVariant::serialize_field(),
    SerializeStruct::serialize_field(key),
    SerializeStructVariant::serialize_field(key),
);

impl ser::SerializeMap for Finite {
    type Ok = ();
    type Error = NotFinite;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, key: &T) -> Done {
        key.serialize(Finite)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, value: &T) -> Done {
        value.serialize(Finite)
    }

    fn end(self) -> Done {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[derive(serde::Serialize)]
    struct Nested {
        counts: Vec<u64>,
        sums: Vec<f64>,
        by_name: BTreeMap<String, (f32, Option<f64>)>,
    }

    #[test]
    fn a_float_that_is_not_finite_is_found_wherever_it_is() {
        let nested = |sum: f64, named: f64| Nested {
            counts: vec![1, 2],
            sums: vec![0.5, sum],
            by_name: BTreeMap::from([("a".into(), (1.0, Some(named)))]),
        };
        assert!(all_finite(&nested(1e300, -0.0)));
        assert!(!all_finite(&nested(f64::NAN, 1.0)));
        assert!(!all_finite(&nested(1.0, f64::NEG_INFINITY)));
        assert!(!all_finite(&(1u8, f32::INFINITY)));
    }
}
