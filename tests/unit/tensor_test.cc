// Tests of runtime/tensor.h: Shape extents and numel, TensorView byte sizes and flat
// slices (addresses computed here from the element size), and the bounds errors.
#include "runtime/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "runtime/error.h"

namespace etr {
namespace {

TEST(Shape, ExtentsAndNumel) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s[0], 2);
  EXPECT_EQ(s[2], 4);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.str(), "[2, 3, 4]");
  EXPECT_EQ(Shape{}.numel(), 1);  // a scalar
  EXPECT_EQ(Shape{}.str(), "[]");
  EXPECT_EQ((Shape{5, 0, 7}.numel()), 0);
  EXPECT_EQ((Shape{1, 2, 3, 4, 5, 6}.numel()), 720);
}

TEST(Shape, Equality) {
  EXPECT_EQ((Shape{2, 3}), (Shape{2, 3}));
  EXPECT_NE((Shape{2, 3}), (Shape{3, 2}));
  EXPECT_NE((Shape{6}), (Shape{6, 1}));
}

TEST(Shape, RejectsTooManyDimsAndNegativeExtents) {
  EXPECT_THROW((Shape{1, 1, 1, 1, 1, 1, 1}), Error);
  try {
    Shape s{4, -1};
    ADD_FAILURE() << "no exception for a negative extent";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("non-negative"), std::string::npos) << e.what();
  }
}

TEST(TensorView, SizesAndDevice) {
  float data[24];
  TensorView v(data, DType::kF32, Shape{2, 3, 4});
  EXPECT_EQ(v.numel(), 24);
  EXPECT_EQ(v.nbytes(), sizeof data);
  EXPECT_EQ(v.data(), data);
  EXPECT_EQ(v.data_as<float>(), data);
  EXPECT_TRUE(v.device().is_cpu());
  TensorView h = TensorView::flat(data, 10, DType::kBF16, Device::cuda(3));
  EXPECT_EQ(h.nbytes(), 20u);
  EXPECT_EQ(h.device(), Device::cuda(3));
  EXPECT_EQ(h.device().str(), "cuda:3");
  const double cd[2] = {1, 2};
  EXPECT_EQ(TensorView::flat(cd, 2, DType::kF64).data(), static_cast<const void*>(cd));
}

TEST(TensorView, SliceAddressesElementsOfTheView) {
  uint16_t data[12];
  TensorView v(data, DType::kBF16, Shape{3, 4}, Device::cuda(1));
  TensorView s = v.slice(5, 4);
  EXPECT_EQ(s.data(), static_cast<void*>(&data[5]));
  EXPECT_EQ(s.numel(), 4);
  EXPECT_EQ(s.shape(), Shape{4});
  EXPECT_EQ(s.dtype(), DType::kBF16);
  EXPECT_EQ(s.device(), Device::cuda(1));
  EXPECT_EQ(v.slice(12, 0).numel(), 0);  // the empty range at the end is inside
  EXPECT_EQ(v.slice(0, 12).data(), static_cast<void*>(data));
}

TEST(TensorView, SliceOutsideTheViewThrows) {
  double data[6];
  TensorView v = TensorView::flat(data, 6, DType::kF64);
  try {
    v.slice(3, 5);
    ADD_FAILURE() << "no exception";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "a slice of 5 elements at offset 3 is outside a view of 6 elements"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(v.slice(-1, 2), Error);
  EXPECT_THROW(v.slice(2, -1), Error);
  EXPECT_THROW(v.slice(7, 0), Error);
  // offset + count overflows int64: still outside, never wrapped into range.
  EXPECT_THROW(v.slice(1, std::numeric_limits<int64_t>::max()), Error);
  EXPECT_THROW(v.slice(std::numeric_limits<int64_t>::max(), 1), Error);
}

}  // namespace
}  // namespace etr
