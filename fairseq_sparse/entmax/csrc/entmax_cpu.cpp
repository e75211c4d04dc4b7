// Fused CPU kernels for alpha-entmax with one alpha per row.
//
// Same maths as fairseq_sparse/entmax/reference.py (the oracle these kernels are
// tested against), reorganised so that each row is touched only a few times:
//
//   z_i = (alpha - 1)(x_i - max x) + 1,   y_i = [z_i - tau]_+^(1/(alpha-1)).
//
// tau >= 0 (the lower bracket), so an entry with z_i <= 0 can never be in the
// support.  After one pass only those "candidates" are kept, and every Newton
// step then drops the candidates that fell below the new tau: tau only grows
// from the lower bracket because h(tau) = ||[z - tau]_+||_k - 1 is convex and
// decreasing.  The root finder therefore iterates over a fraction of the row
// instead of all of it (from tau = 0: on N(0, 1) scores a top-k bracket saved
// fewer power evaluations than its selection cost).  The Newton sums are
// accumulated in double.  The backward pass gathers the support first, so its
// transcendentals also run over the support alone.
// The Tensor class, the one operator used (empty_like) and torch's pybind casters, not
// <torch/extension.h> or <ATen/ATen.h>: those also declare every operator and the C++
// frontend, and parsing them was most of this file's compile time, paid at every set-up.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

// The row-block functions are also compiled for AVX2+FMA (x86-64-v3), and the
// build the CPU supports is picked at load time (GCC function multi-versioning):
// the extension stays portable and still evaluates 8 powers per instruction.
// Helpers are forced inline into the two cloned functions: a dispatched call per
// Newton step cost more than it saved on the short candidate lists of high-alpha
// rows, and AVX-512 clones measured slower than AVX2 for the same reason.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define WIDEST_SIMD __attribute__((target_clones("arch=x86-64-v3", "default")))
#define INLINE_INTO_CLONE inline __attribute__((always_inline))
#else
#define WIDEST_SIMD
#define INLINE_INTO_CLONE inline
#endif

namespace {

constexpr int kMaxNewtonIter = 100;

// Single-precision log and exp written so that loops over a row vectorise (the
// libm versions are opaque calls, one element at a time; they dominated the time
// of the low-alpha heads, whose supports are wide).  Both are accurate to about
// one float32 ulp, which is what the float32 outputs keep anyway.  Double rows
// use libm.  They vectorise only because setup.py passes -fno-trapping-math
// (selects instead of branches); nothing here relies on floating-point traps.
inline float fast_log(float x) {  // x > 0, finite
  const int32_t bits = std::bit_cast<int32_t>(x);
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f800000);  // x = m 2^e, m in [1, 2)
  const float upper = static_cast<float>(m > 1.41421356f);  // recentre: m in [sqrt(1/2), sqrt(2))
  m *= 1.0f - 0.5f * upper;
  const float e = static_cast<float>(((bits >> 23) & 0xff) - 127) + upper;
  // log m = 2 atanh(t), t = (m - 1)/(m + 1), |t| < 0.172: the series to t^9 is exact in float.
  const float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  const float series = 1.0f + t2 * (1.0f / 3 + t2 * (1.0f / 5 + t2 * (1.0f / 7 + t2 * (1.0f / 9))));
  return 2.0f * t * series + e * 0.693147181f;
}

inline float fast_exp(float y) {
  const float keep = static_cast<float>(y >= -87.0f);  // below the smallest normal float: 0
  y = y < -87.0f ? -87.0f : (y > 88.0f ? 88.0f : y);
  // y = n ln2 + r, |r| <= ln2/2; adding 1.5 2^23 rounds to an integer without a
  // libm call, and ln2 is split in two parts (Cody-Waite) so that r is exact.
  const float rounder = 12582912.0f;
  const float n = (y * 1.44269504f + rounder) - rounder;
  const float r = (y - n * 0.693359375f) + n * 2.12194440e-4f;
  const float p = 1.0f + r * (1.0f + r * (1.0f / 2 + r * (1.0f / 6 + r * (1.0f / 24 +
                  r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
  return keep * (p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23));
}

inline double fast_log(double x) { return std::log(x); }
inline double fast_exp(double y) { return std::exp(y); }

// d^e for d > 0 and e >= 0 (d <= 0 gives 0, so masked-out lanes cost nothing).
template <typename math_t>
inline math_t pos_pow(math_t d, math_t e) {
  const bool pos = d > math_t(0);
  const math_t value = fast_exp(e * fast_log(pos ? d : math_t(1)));  // computed for every lane:
  return pos ? value : math_t(0);                                      // no branch, so loops vectorise
}

// Candidates of one row: shifted scores z > 0 and where they came from.  They are
// kept in the row's dtype so that the power sums vectorise; the sums are double.
template <typename scalar_t>
struct Candidates {
  std::vector<scalar_t> z;
  std::vector<int64_t> index;
};

// Keep only the candidates with z > tau (the support can only shrink as tau
// grows).  Branch-free: every entry is copied and the write position advances
// only for the kept ones (which entries survive is data-dependent, so branches
// mispredict).
template <typename scalar_t>
INLINE_INTO_CLONE void drop_below(Candidates<scalar_t>& cand, double tau) {
  const scalar_t t = static_cast<scalar_t>(tau);
  size_t kept = 0;
  for (size_t j = 0; j < cand.z.size(); ++j) {
    const scalar_t zj = cand.z[j];
    cand.z[kept] = zj;
    cand.index[kept] = cand.index[j];
    kept += zj > t;
  }
  cand.z.resize(kept);
  cand.index.resize(kept);
}

// sum_j (z_j - tau)^k and sum_j (z_j - tau)^(k - 1).
template <typename scalar_t>
INLINE_INTO_CLONE void power_sums(const std::vector<scalar_t>& z, double tau, double k, double& power, double& dsum) {
  const scalar_t t = static_cast<scalar_t>(tau), km1 = static_cast<scalar_t>(k - 1.0);
  const scalar_t* zp = z.data();
  const int64_t n = static_cast<int64_t>(z.size());
  double pw = 0.0, ds = 0.0;
  if (k == 1.0) {
#pragma omp simd reduction(+ : pw)
    for (int64_t j = 0; j < n; ++j) pw += static_cast<double>(zp[j] - t);
    ds = static_cast<double>(n);
  } else {
#pragma omp simd reduction(+ : pw, ds)
    for (int64_t j = 0; j < n; ++j) {
      const scalar_t d = zp[j] - t;
      const scalar_t dkm1 = pos_pow(d, km1);
      pw += static_cast<double>(dkm1 * d);
      ds += static_cast<double>(dkm1);
    }
  }
  power = pw;
  dsum = ds;
}

// Newton on h(tau) = ||[z - tau]_+||_k - 1 over the candidates, as in
// reference.threshold: h is convex, decreasing and nonnegative at the start
// (max z = 1 > tau), so the iterates rise monotonically to the root.  Candidates
// falling below tau are dropped as we go.
template <typename scalar_t>
INLINE_INTO_CLONE double newton_threshold(Candidates<scalar_t>& cand, double k, double tau, double tol) {
  for (int it = 0; it < kMaxNewtonIter; ++it) {
    double power, dsum;
    power_sums(cand.z, tau, k, power, dsum);
    if (!(dsum > 0.0)) break;  // every candidate rounded onto tau: tau is the root
    const double norm = k == 1.0 ? power : (k == 2.0 ? std::sqrt(power) : std::pow(power, 1.0 / k));
    const double step = (norm - 1.0) * power / (norm * dsum);
    tau += step;
    drop_below(cand, tau);
    if (step <= tol || cand.z.empty()) break;
  }
  return tau;
}

// z <- (z - tau)^k in place.
template <typename scalar_t>
INLINE_INTO_CLONE void shifted_powers(scalar_t* z, int64_t n, scalar_t tau, scalar_t k) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) z[j] = pos_pow(z[j] - tau, k);
}

// Over the support of a row (y > 0): g = y^(2 - alpha) and the two sums dx needs,
// {g, g dy}.  Sums in the row's dtype: a vectorised reduction adds in a tree, so
// float32 keeps ~1e-7 relative accuracy, and double lanes would halve the width.
template <typename scalar_t>
INLINE_INTO_CLONE void support_sums(const scalar_t* y, const scalar_t* dy, scalar_t* g, int64_t n,
                              scalar_t two_minus_alpha, scalar_t* sums) {
  scalar_t g_sum = 0, gdy_sum = 0;
#pragma omp simd reduction(+ : g_sum, gdy_sum)
  for (int64_t j = 0; j < n; ++j) {
    const scalar_t gj = fast_exp(two_minus_alpha * fast_log(y[j]));
    g[j] = gj;
    g_sum += gj;
    gdy_sum += gj * dy[j];
  }
  sums[0] = g_sum;
  sums[1] = gdy_sum;
}

// Threshold of one row from its candidates, which are left holding the support.
template <typename scalar_t>
INLINE_INTO_CLONE double row_threshold(Candidates<scalar_t>& cand, double alpha, double tol) {
  const double k = 1.0 / (alpha - 1.0);
  double tau = newton_threshold(cand, k, 0.0, tol);
  // Exact threshold on the support just found, where it has a closed form.
  if (!cand.z.empty() && (alpha == 2.0 || alpha == 1.5)) {
    const double n = static_cast<double>(cand.z.size());
    double mean = 0.0;
    for (scalar_t z : cand.z) mean += z;
    mean /= n;
    if (alpha == 2.0) {
      tau = mean - 1.0 / n;
    } else {
      double var = 0.0;
      for (scalar_t z : cand.z) var += (z - mean) * (z - mean);
      var /= n;
      tau = mean - std::sqrt(std::max(1.0 / n - var, 0.0));
    }
  }
  return tau;
}

// Rows [begin, end).  Everything the rows need is inlined here, so that one
// dispatch per block selects the AVX2 build of all of it.
template <typename scalar_t>
WIDEST_SIMD void forward_rows(const scalar_t* x, const scalar_t* alpha, scalar_t* y,
                              int64_t begin, int64_t end, int64_t d, double tol) {
    Candidates<scalar_t> cand;
    cand.z.reserve(d);
    cand.index.reserve(d);
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* xr = x + r * d;
      scalar_t* yr = y + r * d;
      scalar_t m_s = -std::numeric_limits<scalar_t>::infinity();
      for (int64_t i = 0; i < d; ++i) m_s = xr[i] > m_s ? xr[i] : m_s;
      if (!(m_s > -std::numeric_limits<scalar_t>::infinity())) {  // fully masked row
        std::fill(yr, yr + d, scalar_t(0));
        continue;
      }
      const double a = static_cast<double>(alpha[r]);
      const double am1 = a - 1.0;
      // z = (alpha - 1)(x - max) + 1 in the row's dtype: x - max keeps its relative
      // accuracy at any magnitude of the scores, and only z in (0, 1] matters.
      cand.z.resize(d);
      cand.index.resize(d);
      const scalar_t scale = static_cast<scalar_t>(am1);
      size_t kept = 0;
      for (int64_t i = 0; i < d; ++i) {  // branch-free, as in drop_below
        const scalar_t z = scale * (xr[i] - m_s) + scalar_t(1);
        cand.z[kept] = z;
        cand.index[kept] = i;
        kept += z > scalar_t(0);
      }
      cand.z.resize(kept);
      cand.index.resize(kept);
      const double tau = row_threshold(cand, a, tol);
      // y = (z - tau)^k on the support (a vectorised pass over it), scattered into a
      // zeroed row: the support is usually a small part of the row.
      const int64_t n = static_cast<int64_t>(cand.z.size());
      shifted_powers(cand.z.data(), n, static_cast<scalar_t>(tau), static_cast<scalar_t>(1.0 / am1));
      std::fill(yr, yr + d, scalar_t(0));
      for (int64_t j = 0; j < n; ++j) yr[cand.index[j]] = cand.z[j];
    }
}

// phi(w) = exp(-w) - 1 + w, in double (its cancellation costs ~1e-16 / |w| relative).
inline double exp_remainder(double w) { return std::expm1(-w) + w; }

// dy . d y / d alpha of one row from its support, in reference.alpha_gradient's form
// (accurate as alpha -> 1, where Prop. 1's two terms each grow like 1 / (alpha - 1)),
// in double: it runs once per row over the support only.
template <typename scalar_t>
double alpha_gradient(const scalar_t* y, const scalar_t* dy, int64_t n, double delta) {
  double total = 0.0;
  for (int64_t j = 0; j < n; ++j) total += y[j];
  if (!(total > 0.0)) return 0.0;
  std::vector<double> yhat(n), log_y(n);
  double mu = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    yhat[j] = y[j] / total;
    log_y[j] = std::log(static_cast<double>(y[j]));
    mu += yhat[j] * log_y[j];
  }
  double s = 0.0;
  for (int64_t j = 0; j < n; ++j) s += yhat[j] * exp_remainder(delta * (log_y[j] - mu));
  const double c = std::log1p(s);
  double grad = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    const double w = delta * (log_y[j] - mu) + c, phi = exp_remainder(w);
    grad += dy[j] * yhat[j] * ((c - phi) / (delta * delta) + mu * (phi - w) / delta);
  }
  return grad;
}

template <typename scalar_t>
WIDEST_SIMD void backward_rows(const scalar_t* y, const scalar_t* dy, const scalar_t* alpha,
                               scalar_t* dx, scalar_t* dalpha, int64_t begin, int64_t end, int64_t d) {
    // The support of each row, gathered first: off it y = 0 contributes nothing to
    // any sum and dx = 0, so the transcendentals run over the support alone.
    std::vector<int64_t> index(d);
    std::vector<scalar_t> ys(d), dys(d), gs(d);
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* yr = y + r * d;
      const scalar_t* dyr = dy + r * d;
      scalar_t* dxr = dx + r * d;
      int64_t n = 0;
      for (int64_t i = 0; i < d; ++i) {  // branch-free compaction
        index[n] = i;
        ys[n] = yr[i];
        dys[n] = dyr[i];
        n += yr[i] > scalar_t(0);
      }
      const double a = static_cast<double>(alpha[r]);
      scalar_t sums[2];
      support_sums(ys.data(), dys.data(), gs.data(), n, static_cast<scalar_t>(2.0 - a), sums);
      const scalar_t g_sum = sums[0], gdy_sum = sums[1];
      const double q = g_sum > 0 ? static_cast<double>(gdy_sum) / g_sum : 0.0;
      const scalar_t qs = static_cast<scalar_t>(q);
      std::fill(dxr, dxr + d, scalar_t(0));
      for (int64_t j = 0; j < n; ++j) dxr[index[j]] = gs[j] * (dys[j] - qs);
      if (dalpha) dalpha[r] = static_cast<scalar_t>(alpha_gradient(ys.data(), dys.data(), n, a - 1.0));
    }
}

void check_rows(const at::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
              name, " must be float32 or float64");
}

}  // namespace

// x: (rows, d); alpha: (rows,) in (1, 2].  Returns y of the shape and dtype of x.
at::Tensor entmax_forward(at::Tensor x, at::Tensor alpha, double tol) {
  check_rows(x, "x");
  check_rows(alpha, "alpha");
  TORCH_CHECK(x.dim() == 2 && alpha.numel() == x.size(0), "x must be (rows, d) and alpha (rows,)");
  auto y = at::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "entmax_forward", [&] {
    const scalar_t *xp = x.data_ptr<scalar_t>(), *ap = alpha.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    const int64_t d = x.size(1);
    at::parallel_for(0, x.size(0), 16, [&](int64_t begin, int64_t end) {
      forward_rows<scalar_t>(xp, ap, yp, begin, end, d, tol);
    });
  });
  return y;
}

// Returns (dx, dalpha); dalpha is (rows,) or an empty tensor when not requested.
std::vector<at::Tensor> entmax_backward(at::Tensor y, at::Tensor dy, at::Tensor alpha, bool alpha_grad) {
  check_rows(y, "y");
  check_rows(dy, "grad_output");
  check_rows(alpha, "alpha");
  TORCH_CHECK(y.sizes() == dy.sizes() && alpha.numel() == y.size(0), "shape mismatch");
  auto dx = at::empty_like(y);
  auto dalpha = alpha_grad ? at::empty_like(alpha) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "entmax_backward", [&] {
    const scalar_t *yp = y.data_ptr<scalar_t>(), *dyp = dy.data_ptr<scalar_t>(), *ap = alpha.data_ptr<scalar_t>();
    scalar_t* dxp = dx.data_ptr<scalar_t>();
    scalar_t* dap = alpha_grad ? dalpha.data_ptr<scalar_t>() : nullptr;
    const int64_t d = y.size(1);
    at::parallel_for(0, y.size(0), 16, [&](int64_t begin, int64_t end) {
      backward_rows<scalar_t>(yp, dyp, ap, dxp, dap, begin, end, d);
    });
  });
  return {dx, dalpha};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &entmax_forward, "alpha-entmax forward over rows (CPU)");
  m.def("backward", &entmax_backward, "alpha-entmax backward over rows (CPU)");
}
