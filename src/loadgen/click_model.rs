//! The position-based click model: how likely a user examines a rank, clicks
//! an examined item, and goes on to add it to the cart and buy it.

/// P(examine rank j) = j^-EXAMINATION_EXPONENT.
const EXAMINATION_EXPONENT: f64 = 0.8;

/// Interaction types of the default grade table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Feedback {
    Click,
    AddToCart,
    Purchase,
}

impl Feedback {
    pub(super) const CHAIN: [Feedback; 3] =
        [Feedback::Click, Feedback::AddToCart, Feedback::Purchase];

    pub(super) fn as_str(self) -> &'static str {
        match self {
            Feedback::Click => "click",
            Feedback::AddToCart => "add_to_cart",
            Feedback::Purchase => "purchase",
        }
    }
}

/// P(click | examined) of an item of latent relevance `r` in [0, 1].
fn click_probability(r: f64) -> f64 {
    0.02 + 0.7 * r
}

/// P(add_to_cart | click).
fn cart_probability(r: f64) -> f64 {
    0.1 + 0.3 * r
}

/// P(purchase | add_to_cart).
fn purchase_probability(r: f64) -> f64 {
    0.2 + 0.4 * r
}

/// P(examine | shown at `rank`), ranks counted from 1.
pub(super) fn examination_probability(rank: usize) -> f64 {
    (rank as f64).powf(-EXAMINATION_EXPONENT)
}

/// How deep down click → cart → purchase a user goes on an item of latent
/// relevance `relevance` that they examine with probability `examination`;
/// `None` when they do not click it.
pub(super) fn engagement_depth(
    rng: &mut fastrand::Rng,
    examination: f64,
    relevance: f64,
) -> Option<usize> {
    if rng.f64() >= examination || rng.f64() >= click_probability(relevance) {
        return None;
    }
    if rng.f64() >= cart_probability(relevance) {
        return Some(1);
    }
    if rng.f64() >= purchase_probability(relevance) {
        return Some(2);
    }
    Some(3)
}
