#include "algorithms/lars.h"

#include <cmath>

#include "algorithms/reduce.h"

namespace tfring {
namespace {

inline float widen(float x) { return x; }
inline double widen(double x) { return x; }
inline float widen(Half x) { return halfToFloat(x.bits); }

inline void store(float* p, float x) { *p = x; }
inline void store(double* p, double x) { *p = x; }
inline void store(Half* p, float x) { p->bits = floatToHalf(x); }

template <typename T>
double sumSquares(const T* x, size_t n) {
  // Four partial sums keep the loop vectorisable and the rounding error small.
  double s[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      double e = widen(x[i + k]);
      s[k] += e * e;
    }
  }
  for (; i < n; ++i) {
    double e = widen(x[i]);
    s[0] += e * e;
  }
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// C: the arithmetic type (float for 16/32-bit variables, double for float64).
template <typename C, typename T, typename V>
void apply(T* w, V* v, const T* g, size_t n, double localLr, const LarsParams& p) {
  const C lr = static_cast<C>(localLr);
  const C m = static_cast<C>(p.momentum);
  const C decay = static_cast<C>(p.weightDecay);
  if (p.nesterov) {
    for (size_t i = 0; i < n; ++i) {
      C wi = widen(w[i]);
      C step = lr * (static_cast<C>(widen(g[i])) + decay * wi);
      C vi = m * static_cast<C>(v[i]) + step;
      v[i] = static_cast<V>(vi);
      store(&w[i], wi - (m * vi + step));
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      C wi = widen(w[i]);
      C vi = m * static_cast<C>(v[i]) + lr * (static_cast<C>(widen(g[i])) + decay * wi);
      v[i] = static_cast<V>(vi);
      store(&w[i], wi - vi);
    }
  }
}

}  // namespace

double sumOfSquares(const float* x, size_t n) { return sumSquares(x, n); }
double sumOfSquares(const double* x, size_t n) { return sumSquares(x, n); }
double sumOfSquares(const Half* x, size_t n) { return sumSquares(x, n); }

double larsTrustRatio(const LarsParams& p, double weightSq, double gradSq) {
  if (!p.adapt || !(weightSq > 0) || !(gradSq > 0)) return 1.0;
  double wNorm = std::sqrt(weightSq);
  double gNorm = std::sqrt(gradSq);
  return p.trustCoefficient * wNorm / (gNorm + p.weightDecay * wNorm + p.epsilon);
}

void larsApply(float* w, float* v, const float* g, size_t n, double localLr, const LarsParams& p) {
  apply<float>(w, v, g, n, localLr, p);
}
void larsApply(double* w, double* v, const double* g, size_t n, double localLr, const LarsParams& p) {
  apply<double>(w, v, g, n, localLr, p);
}
void larsApply(Half* w, float* v, const Half* g, size_t n, double localLr, const LarsParams& p) {
  apply<float>(w, v, g, n, localLr, p);
}

}  // namespace tfring
