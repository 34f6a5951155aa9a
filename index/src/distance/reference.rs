//! f64 reference implementations: slow, obviously correct, used by tests and ground truth.

/// ⟨a, b⟩ accumulated in f64.
pub fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| f64::from(x) * f64::from(y))
        .sum()
}

/// ‖a − b‖² accumulated in f64.
pub fn l2_squared(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| {
            let d = f64::from(x) - f64::from(y);
            d * d
        })
        .sum()
}

/// Σ|aᵢ·bᵢ| — the quantity floating-point error bounds of a dot product scale with.
pub fn abs_dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs())
        .sum()
}
