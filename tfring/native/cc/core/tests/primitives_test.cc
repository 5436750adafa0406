// SHA-256 / HMAC vectors, 16-bit float conversions, the typed reductions and the error codes.
#include <cmath>
#include <cstring>

#include "algorithms/reduce.h"
#include "error_code.h"
#include "rendezvous/hmac.h"
#include "tests/test_framework.h"

using namespace tfring;

TEST(sha256_known_vectors) {
  CHECK_EQ(toHex(sha256("abc", 3)),
           std::string("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
  CHECK_EQ(toHex(sha256("", 0)),
           std::string("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
  std::string million(1000000, 'a');
  CHECK_EQ(toHex(sha256(million.data(), million.size())),
           std::string("cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"));
}

TEST(hmac_rfc4231) {
  // Test case 1 and 2 of RFC 4231.
  std::string key1(20, '\x0b');
  CHECK_EQ(toHex(hmacSha256(key1, "Hi There", 8)),
           std::string("b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"));
  const char* data2 = "what do ya want for nothing?";
  CHECK_EQ(toHex(hmacSha256("Jefe", data2, std::strlen(data2))),
           std::string("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"));
  // Test case 6: a key longer than the block is hashed first.
  std::string key6(131, '\xaa');
  const char* data6 = "Test Using Larger Than Block-Size Key - Hash Key First";
  CHECK_EQ(toHex(hmacSha256(key6, data6, std::strlen(data6))),
           std::string("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"));
}

TEST(half_roundtrip_every_value) {
  for (uint32_t h = 0; h < 65536; ++h) {
    uint16_t v = static_cast<uint16_t>(h);
    float f = halfToFloat(v);
    if (std::isnan(f)) {
      CHECK(std::isnan(halfToFloat(floatToHalf(f))));
      continue;
    }
    CHECK_EQ(floatToHalf(f), v);
  }
  CHECK_EQ(halfToFloat(0x3c00), 1.0f);
  CHECK_EQ(floatToHalf(65504.0f), 0x7bff);
  CHECK_EQ(floatToHalf(1e6f), 0x7c00);                      // overflow to +inf
  CHECK_EQ(floatToHalf(1.0f + 1.0f / 2048), 0x3c00);        // tie rounds to even
  CHECK_EQ(floatToHalf(1.0f + 3.0f / 2048), 0x3c02);
  CHECK_EQ(floatToHalf(std::ldexp(1.0f, -25)), 0);          // half of the smallest subnormal: even -> 0
  CHECK_EQ(floatToHalf(std::ldexp(1.5f, -24)), 2);
}

TEST(bfloat16_conversions) {
  CHECK_EQ(bfloat16ToFloat(0x3f80), 1.0f);
  CHECK_EQ(floatToBfloat16(1.0f), 0x3f80);
  CHECK_EQ(floatToBfloat16(1.00390625f), 0x3f80);  // tie: even
  CHECK_EQ(floatToBfloat16(1.01171875f), 0x3f82);  // tie: up to even
  CHECK(std::isnan(bfloat16ToFloat(floatToBfloat16(std::nanf("")))));
}

TEST(reduce_ops_all_types) {
  float a[5] = {1, -2, 3, 4, 0.5f}, b[5] = {2, 5, -1, 4, 4}, out[5];
  reduceInto(out, a, b, 5, DataType::kFloat32, ReduceOp::kSum);
  CHECK_EQ(out[1], 3.0f);
  reduceInto(out, a, b, 5, DataType::kFloat32, ReduceOp::kMin);
  CHECK_EQ(out[1], -2.0f);
  reduceInto(out, a, b, 5, DataType::kFloat32, ReduceOp::kMax);
  CHECK_EQ(out[2], 3.0f);
  reduceInto(out, a, b, 5, DataType::kFloat32, ReduceOp::kProduct);
  CHECK_EQ(out[4], 2.0f);
  int64_t ia[3] = {1LL << 40, 5, -7}, ib[3] = {1, 6, 2};
  reduceInto(ia, ia, ib, 3, DataType::kInt64, ReduceOp::kSum);  // aliasing dst == a
  CHECK_EQ(ia[0], (1LL << 40) + 1);
  int64_t ma[3] = {1LL << 40, 5, -7}, mb[3] = {1, 6, 2};
  reduceMeanInto(ma, ma, mb, 3, DataType::kInt64, 2);  // a mean over 2 ranks, aliasing dst == a
  CHECK_EQ(ma[0], ((1LL << 40) + 1) / 2);
  CHECK_EQ(ma[2], -2);  // truncation toward zero
  uint16_t ha[300], hb[300], ho[300];
  for (int i = 0; i < 300; ++i) {
    ha[i] = floatToHalf(static_cast<float>(i));
    hb[i] = floatToHalf(0.5f);
  }
  reduceInto(ho, ha, hb, 300, DataType::kFloat16, ReduceOp::kSum);
  CHECK_EQ(halfToFloat(ho[299]), 299.5f);
  uint16_t ba = floatToBfloat16(3.0f), bb = floatToBfloat16(2.0f), bo;
  reduceInto(&bo, &ba, &bb, 1, DataType::kBFloat16, ReduceOp::kProduct);
  CHECK_EQ(bfloat16ToFloat(bo), 6.0f);
}

TEST(reduce_mean_rounds_16_bit_floats_once_and_keeps_the_other_types_bits) {
  // 3 ranks of float16: 100.5 + 100.5 = 201 exactly, then + 85.875 = 286.875, which float16
  // cannot hold (287): 286.875 / 3 = 95.625, but 287 / 3 would round to 95.6875.
  uint16_t partial = floatToHalf(201.0f), own = floatToHalf(85.875f), mean;
  reduceMeanInto(&mean, &partial, &own, 1, DataType::kFloat16, 3);
  CHECK_EQ(halfToFloat(mean), 95.625f);
  uint16_t bp = floatToBfloat16(354.0f), bo = floatToBfloat16(248.0f), bm;  // 602 / 3, bf16 holds 600 or 604
  reduceMeanInto(&bm, &bp, &bo, 1, DataType::kBFloat16, 3);
  CHECK_EQ(bfloat16ToFloat(bm), 201.0f);
  // float32 and float64: exactly the sum, then a true division by the divisor.
  float fa[64], fb[64], fm[64];
  double da[64], db[64], dm[64];
  for (int i = 0; i < 64; ++i) {
    fa[i] = std::sin(static_cast<float>(i)) * 1e3f;
    fb[i] = std::cos(static_cast<float>(i * 7)) * 1e-2f;
    da[i] = std::sin(i * 1.0) * 1e3;
    db[i] = std::cos(i * 7.0) * 1e-2;
  }
  reduceMeanInto(fm, fa, fb, 64, DataType::kFloat32, 7);
  reduceMeanInto(dm, da, db, 64, DataType::kFloat64, 7);
  for (int i = 0; i < 64; ++i) {
    const float fsum = fa[i] + fb[i];
    const double dsum = da[i] + db[i];
    CHECK_EQ(fm[i], fsum / 7.0f);
    CHECK_EQ(dm[i], dsum / 7.0);
  }
  reduceMeanInto(fm, fa, fb, 64, DataType::kFloat32, 1);  // one rank: the sum
  CHECK_EQ(fm[5], fa[5] + fb[5]);
  reduceMeanInto(nullptr, nullptr, nullptr, 0, DataType::kFloat16, 3);  // nothing to touch
  CHECK_THROWS(reduceMeanInto(fm, fa, fb, 1, DataType::kFloat32, 0), "a mean over 0 ranks");
}

TEST(min_max_propagate_nan_on_either_side) {
  // NumPy's minimum/maximum: the result must not depend on which rank holds the NaN.
  const float nan = std::nanf("");
  float a[3] = {nan, 1.0f, nan}, b[3] = {2.0f, nan, nan}, out[3];
  for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
    reduceInto(out, a, b, 3, DataType::kFloat32, op);
    for (float x : out) CHECK(std::isnan(x));
    reduceInto(out, b, a, 3, DataType::kFloat32, op);
    for (float x : out) CHECK(std::isnan(x));
  }
  double da[2] = {std::nan(""), 3.0}, db[2] = {1.0, std::nan("")}, dout[2];
  reduceInto(dout, da, db, 2, DataType::kFloat64, ReduceOp::kMax);
  CHECK(std::isnan(dout[0]) && std::isnan(dout[1]));
  uint16_t ha[2] = {floatToHalf(nan), floatToHalf(1.0f)}, hb[2] = {floatToHalf(5.0f), floatToHalf(nan)}, hout[2];
  reduceInto(hout, ha, hb, 2, DataType::kFloat16, ReduceOp::kMin);
  CHECK(std::isnan(halfToFloat(hout[0])) && std::isnan(halfToFloat(hout[1])));
  uint16_t ba[2] = {floatToBfloat16(nan), floatToBfloat16(1.0f)}, bb[2] = {floatToBfloat16(5.0f), floatToBfloat16(nan)}, bout[2];
  reduceInto(bout, ba, bb, 2, DataType::kBFloat16, ReduceOp::kMax);
  CHECK(std::isnan(bfloat16ToFloat(bout[0])) && std::isnan(bfloat16ToFloat(bout[1])));
}

TEST(error_codes_have_stable_values_and_names) {
  // The C API returns these values and Python maps the names to exceptions: never renumber.
  CHECK_EQ(static_cast<int>(Code::kOk), 0);
  CHECK_EQ(std::string(codeName(Code::kOk)), std::string("OK"));
  CHECK_EQ(std::string(codeName(1)), std::string("INVALID_ARGUMENT"));
  CHECK_EQ(std::string(codeName(2)), std::string("UNAVAILABLE"));
  CHECK_EQ(std::string(codeName(3)), std::string("DEADLINE_EXCEEDED"));
  CHECK_EQ(std::string(codeName(4)), std::string("FAILED_PRECONDITION"));
  CHECK_EQ(std::string(codeName(Code::kInternal)), std::string("INTERNAL"));
  CHECK_EQ(std::string(codeName(6)), std::string("UNKNOWN"));
  CHECK_EQ(std::string(codeName(-1)), std::string("UNKNOWN"));
}
