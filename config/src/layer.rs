//! Layering: the three ways a host-level setting stacks on the layer below
//! ([`replace`], [`Fields`], [`entries`]; `hostsettings` names one per
//! setting), and request limits layered.
//!
//! Limits come in layers, each field optional: the built-in values, then
//! `[defaults.limits]`, then a host's own `limits`. A later layer overrides
//! an earlier one field by field; a field a layer leaves out is inherited.
//! Further layers (named bundles, routes) stack the same way with
//! [`LimitsLayer::merge`].

use gapura_gate::RequestLimits;

/// `replace`: the upper layer's value, whole, when it has one; else the
/// lower layer's.
pub(crate) fn replace<T: Clone>(base: &Option<T>, over: &Option<T>) -> Option<T> {
    over.as_ref().or(base.as_ref()).cloned()
}

/// `fields`: a table whose fields stack one by one, each as [`replace`]
/// does.
pub(crate) trait Fields {
    /// `over` on top of `base`, field by field.
    fn merge_fields(base: &Self, over: &Self) -> Self;
}

/// `entries`: keyed entries, each replaced whole by the upper layer that
/// sets it; keys only the upper layer has come after the lower layer's, in
/// its order.
pub(crate) fn entries<K: PartialEq + Copy, V: Clone>(
    base: &[(K, V)],
    over: &[(K, V)],
) -> Vec<(K, V)> {
    let mut merged = base.to_vec();
    for (key, value) in over {
        match merged.iter_mut().find(|(k, _)| k == key) {
            Some(slot) => slot.1 = value.clone(),
            None => merged.push((*key, value.clone())),
        }
    }
    merged
}

/// One layer of limits; `None` inherits the field from the layer below.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct LimitsLayer {
    pub max_body_bytes: Option<u64>,
    pub max_header_count: Option<u32>,
    pub max_header_bytes: Option<u32>,
    pub max_url_bytes: Option<u32>,
}

impl LimitsLayer {
    /// A layer that sets every field to `limits`.
    pub(crate) fn full(limits: RequestLimits) -> LimitsLayer {
        LimitsLayer {
            max_body_bytes: Some(limits.max_body_bytes),
            max_header_count: Some(limits.max_header_count),
            max_header_bytes: Some(limits.max_header_bytes),
            max_url_bytes: Some(limits.max_url_bytes),
        }
    }

    /// The built-in limits as a full layer.
    pub(crate) fn builtin() -> LimitsLayer {
        LimitsLayer::full(RequestLimits::default())
    }

    /// `over` on top of `base`, field by field.
    pub(crate) fn merge(base: LimitsLayer, over: LimitsLayer) -> LimitsLayer {
        LimitsLayer {
            max_body_bytes: over.max_body_bytes.or(base.max_body_bytes),
            max_header_count: over.max_header_count.or(base.max_header_count),
            max_header_bytes: over.max_header_bytes.or(base.max_header_bytes),
            max_url_bytes: over.max_url_bytes.or(base.max_url_bytes),
        }
    }

    /// The limits of this layer on top of the built-ins.
    pub(crate) fn resolve(self) -> RequestLimits {
        let b = RequestLimits::default();
        RequestLimits {
            max_body_bytes: self.max_body_bytes.unwrap_or(b.max_body_bytes),
            max_header_count: self.max_header_count.unwrap_or(b.max_header_count),
            max_header_bytes: self.max_header_bytes.unwrap_or(b.max_header_bytes),
            max_url_bytes: self.max_url_bytes.unwrap_or(b.max_url_bytes),
        }
    }
}

impl Fields for LimitsLayer {
    fn merge_fields(base: &Self, over: &Self) -> Self {
        LimitsLayer::merge(*base, *over)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_overrides_only_the_fields_a_layer_sets() {
        let defaults = LimitsLayer {
            max_body_bytes: Some(1000),
            max_url_bytes: Some(2048),
            ..LimitsLayer::default()
        };
        let host = LimitsLayer {
            max_url_bytes: Some(512),
            ..LimitsLayer::default()
        };
        let merged = LimitsLayer::merge(LimitsLayer::merge(LimitsLayer::builtin(), defaults), host);
        assert_eq!(
            merged.resolve(),
            RequestLimits {
                max_body_bytes: 1000,
                max_header_count: 100,
                max_header_bytes: 32 * 1024,
                max_url_bytes: 512,
            }
        );
    }

    #[test]
    fn empty_layers_resolve_to_builtins() {
        assert_eq!(LimitsLayer::default().resolve(), RequestLimits::default());
        assert_eq!(LimitsLayer::builtin().resolve(), RequestLimits::default());
    }
}
