// LARS (You, Gitman, Ginsburg 2017): the per-variable update, framework-free.
//
// For a variable w with gradient g, momentum m, weight decay β, trust coefficient η:
//   ratio = η‖w‖ / (‖g‖ + β‖w‖ + ε)   (1 when ‖w‖ or ‖g‖ is 0, or when adaptation is off)
//   λ     = lr · ratio
//   v     ← m·v + λ·(g + βw)
//   w     ← w − v                       (Nesterov: w ← w − (m·v + λ·(g + βw)))
// Weight decay is coupled (inside the ratio and the update), as in the paper. Norms accumulate in
// double; the update runs in float32 for 16/32-bit variables (the velocity of a float16 variable
// is float32) and in double for float64 ones.
//
// Work splits into blocks so a caller can run blocks on several threads: squared norms are summed
// per block (sumOfSquares), combined in block order (so the result does not depend on threads),
// then every block is updated (larsApply).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tfring {

struct LarsParams {
  double momentum = 0.9;
  double weightDecay = 0.0;       // β; 0 for variables excluded from weight decay
  double trustCoefficient = 0.001;  // η
  double epsilon = 0.0;
  bool adapt = true;              // false: ratio 1 (variables excluded from layer adaptation)
  bool nesterov = false;
};

// The elements of one block (the unit of parallel work and of the norm summation order).
constexpr size_t kLarsBlock = 1 << 16;

// Half-precision storage: IEEE binary16 bits.
struct Half {
  uint16_t bits;
};

// Σ x[i]² over [0, n), accumulated in double.
double sumOfSquares(const float* x, size_t n);
double sumOfSquares(const double* x, size_t n);
double sumOfSquares(const Half* x, size_t n);

// The trust ratio from the squared norms of w and g.
double larsTrustRatio(const LarsParams& p, double weightSq, double gradSq);

// The update of elements [0, n) with the local learning rate λ = lr · ratio.
void larsApply(float* w, float* v, const float* g, size_t n, double localLr, const LarsParams& p);
void larsApply(double* w, double* v, const double* g, size_t n, double localLr, const LarsParams& p);
void larsApply(Half* w, float* v, const Half* g, size_t n, double localLr, const LarsParams& p);

// The whole update on the calling thread. Returns the trust ratio.
template <typename T, typename V>
double larsUpdate(T* w, V* v, const T* g, size_t n, double lr, const LarsParams& p) {
  double weightSq = 0, gradSq = 0;
  if (p.adapt) {
    for (size_t start = 0; start < n; start += kLarsBlock) {
      size_t len = n - start < kLarsBlock ? n - start : kLarsBlock;
      weightSq += sumOfSquares(w + start, len);
      gradSq += sumOfSquares(g + start, len);
    }
  }
  double ratio = larsTrustRatio(p, weightSq, gradSq);
  larsApply(w, v, g, n, lr * ratio, p);
  return ratio;
}

}  // namespace tfring
