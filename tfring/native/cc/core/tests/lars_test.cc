// The LARS update against a plain double-precision transcription of the formulas.
#include <cmath>
#include <random>
#include <vector>

#include "algorithms/lars.h"
#include "algorithms/reduce.h"
#include "tests/test_framework.h"

using namespace tfring;

namespace {

struct Reference {
  std::vector<double> w, v;
  double ratio;
};

Reference reference(std::vector<double> w, std::vector<double> v, const std::vector<double>& g, double lr,
                    const LarsParams& p) {
  double wn = 0, gn = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    wn += w[i] * w[i];
    gn += g[i] * g[i];
  }
  wn = std::sqrt(wn);
  gn = std::sqrt(gn);
  double ratio = (p.adapt && wn > 0 && gn > 0) ? p.trustCoefficient * wn / (gn + p.weightDecay * wn + p.epsilon) : 1;
  double local = lr * ratio;
  for (size_t i = 0; i < w.size(); ++i) {
    double step = local * (g[i] + p.weightDecay * w[i]);
    v[i] = p.momentum * v[i] + step;
    w[i] -= p.nesterov ? p.momentum * v[i] + step : v[i];
  }
  return {w, v, ratio};
}

std::vector<double> randomVector(size_t n, double scale, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, scale);
  std::vector<double> x(n);
  for (auto& e : x) e = normal(rng);
  return x;
}

bool close(double got, double want, double rtol, double atol) {
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

void checkFloat(size_t n, const LarsParams& p, double wScale, double gScale) {
  auto w = randomVector(n, wScale, 1), v = randomVector(n, 0.01, 2), g = randomVector(n, gScale, 3);
  std::vector<float> wf(w.begin(), w.end()), vf(v.begin(), v.end()), gf(g.begin(), g.end());
  // The reference starts from the same float32 values.
  std::vector<double> w0(wf.begin(), wf.end()), v0(vf.begin(), vf.end()), g0(gf.begin(), gf.end());
  Reference want = reference(w0, v0, g0, 0.5, p);
  double ratio = larsUpdate(wf.data(), vf.data(), gf.data(), n, 0.5, p);
  CHECK(close(ratio, want.ratio, 1e-12, 0));
  for (size_t i = 0; i < n; ++i) {
    CHECK(close(wf[i], want.w[i], 1e-6, 1e-7));
    CHECK(close(vf[i], want.v[i], 1e-6, 1e-9));
  }
}

}  // namespace

TEST(lars_float32_matches_the_formulas) {
  LarsParams p;
  p.momentum = 0.9;
  p.weightDecay = 1e-4;
  p.trustCoefficient = 0.001;
  for (size_t n : {size_t(1), size_t(7), size_t(4099), kLarsBlock * 2 + 3}) {
    checkFloat(n, p, 1.0, 0.1);
    p.nesterov = true;
    checkFloat(n, p, 1.0, 0.1);
    p.nesterov = false;
  }
  p.epsilon = 1e-3;
  checkFloat(100, p, 0.01, 1.0);
  p.adapt = false;  // excluded from adaptation: ratio 1
  checkFloat(100, p, 1.0, 0.1);
  p.weightDecay = 0;  // and from decay
  checkFloat(100, p, 1.0, 0.1);
}

TEST(lars_zero_norms_give_ratio_one) {
  LarsParams p;
  std::vector<float> w(10, 0.0f), v(10, 0.0f), g(10, 0.5f);
  CHECK_EQ(larsUpdate(w.data(), v.data(), g.data(), 10, 0.1, p), 1.0);  // zero-initialised bias moves
  CHECK(close(w[0], -0.05, 1e-6, 0));
  std::vector<float> w2(10, 1.0f), v2(10, 0.0f), g2(10, 0.0f);
  CHECK_EQ(larsUpdate(w2.data(), v2.data(), g2.data(), 10, 0.1, p), 1.0);
  CHECK_EQ(larsTrustRatio(p, 0.0, 0.0), 1.0);
}

TEST(lars_float64_and_float16) {
  LarsParams p;
  p.weightDecay = 5e-4;
  p.nesterov = true;
  size_t n = 1000;
  auto w = randomVector(n, 1.0, 4), v = randomVector(n, 0.01, 5), g = randomVector(n, 0.1, 6);
  Reference want = reference(w, v, g, 0.2, p);
  std::vector<double> wd = w, vd = v;
  CHECK(close(larsUpdate(wd.data(), vd.data(), g.data(), n, 0.2, p), want.ratio, 1e-14, 0));
  for (size_t i = 0; i < n; ++i) CHECK(close(wd[i], want.w[i], 1e-13, 1e-15));

  // float16 weights and gradients, float32 velocity: compare with the reference from the same
  // half values, to half precision.
  std::vector<Half> wh(n), gh(n);
  std::vector<float> vh(v.begin(), v.end());
  for (size_t i = 0; i < n; ++i) {
    wh[i].bits = floatToHalf(static_cast<float>(w[i]));
    gh[i].bits = floatToHalf(static_cast<float>(g[i]));
  }
  std::vector<double> w0(n), g0(n), v0(vh.begin(), vh.end());
  for (size_t i = 0; i < n; ++i) {
    w0[i] = halfToFloat(wh[i].bits);
    g0[i] = halfToFloat(gh[i].bits);
  }
  Reference half = reference(w0, v0, g0, 0.2, p);
  CHECK(close(larsUpdate(wh.data(), vh.data(), gh.data(), n, 0.2, p), half.ratio, 1e-12, 0));
  for (size_t i = 0; i < n; ++i) {
    CHECK(close(halfToFloat(wh[i].bits), half.w[i], 1e-3, 1e-6));
    CHECK(close(vh[i], half.v[i], 1e-6, 1e-9));
  }
}
