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
// instead of all of it.  Row-level sums are accumulated in double.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

namespace {

constexpr int kMaxNewtonIter = 100;

// d^(k - 1) for d > 0, with the exponents that need no transcendental call.
// `math_t` is float for float32 rows: single-precision log/exp are several times
// cheaper and accurate far beyond what a float32 output keeps; sums stay double.
template <typename scalar_t>
using math_type = typename std::conditional<std::is_same<scalar_t, float>::value, float, double>::type;

template <typename math_t>
inline double pow_km1(double d, double k) {
  if (k == 1.0) return 1.0;
  if (k == 2.0) return d;
  return std::exp(static_cast<math_t>(k - 1.0) * std::log(static_cast<math_t>(d)));
}

// Keep only the entries with z > tau (the support can only shrink as tau grows),
// and their positions in the row when `index` is given.
void drop_below(std::vector<double>& z, std::vector<int64_t>* index, double tau) {
  size_t kept = 0;
  for (size_t j = 0; j < z.size(); ++j)
    if (z[j] > tau) {
      z[kept] = z[j];
      if (index) (*index)[kept] = (*index)[j];
      ++kept;
    }
  z.resize(kept);
  if (index) index->resize(kept);
}

// Candidates of one row: shifted scores z > 0 and where they came from.
struct Candidates {
  std::vector<double> z;
  std::vector<int64_t> index;
  void clear() { z.clear(); index.clear(); }
};

// Newton on h(tau) = ||[z - tau]_+||_k - 1 over `z`, as in reference.threshold:
// h is convex, decreasing and nonnegative at the start (max z = 1 > tau), so the
// iterates rise monotonically to the root.  Entries falling below tau are dropped
// as we go (together with their indices when `index` is given).
template <typename math_t>
double newton_threshold(std::vector<double>& z, std::vector<int64_t>* index, double k, double tau, double tol) {
  for (int it = 0; it < kMaxNewtonIter; ++it) {
    double power = 0.0, dsum = 0.0;
    for (double zj : z) {
      const double d = zj - tau;
      const double dkm1 = pow_km1<math_t>(d, k);
      power += dkm1 * d;
      dsum += dkm1;
    }
    const double norm = k == 1.0 ? power : (k == 2.0 ? std::sqrt(power) : std::pow(power, 1.0 / k));
    const double step = (norm - 1.0) * power / (norm * dsum);
    tau += step;
    drop_below(z, index, tau);
    if (step <= tol || z.empty()) break;
  }
  return tau;
}

constexpr size_t kBracketSize = 16;

// Threshold of one row from its candidates, which are left holding the support.
template <typename math_t>
double row_threshold(Candidates& cand, std::vector<double>& top, double alpha, double tol) {
  const double k = 1.0 / (alpha - 1.0);
  double tau = 0.0;
  if (cand.z.size() > 4 * kBracketSize) {
    // Dropping entries only lowers h, so the root over the largest few candidates
    // is a lower bound on the true threshold: a valid, much tighter start that
    // discards most candidates before the iterations over all of them.
    top.assign(cand.z.begin(), cand.z.end());
    std::nth_element(top.begin(), top.begin() + kBracketSize - 1, top.end(), std::greater<double>());
    top.resize(kBracketSize);
    tau = newton_threshold<math_t>(top, nullptr, k, 0.0, tol);
    drop_below(cand.z, &cand.index, tau);
  }
  tau = newton_threshold<math_t>(cand.z, &cand.index, k, tau, tol);
  // Exact threshold on the support just found, where it has a closed form.
  if (!cand.z.empty() && (alpha == 2.0 || alpha == 1.5)) {
    const double n = static_cast<double>(cand.z.size());
    double mean = 0.0;
    for (double z : cand.z) mean += z;
    mean /= n;
    if (alpha == 2.0) {
      tau = mean - 1.0 / n;
    } else {
      double var = 0.0;
      for (double z : cand.z) var += (z - mean) * (z - mean);
      var /= n;
      tau = mean - std::sqrt(std::max(1.0 / n - var, 0.0));
    }
  }
  return tau;
}

template <typename scalar_t>
void forward_rows(const scalar_t* x, const scalar_t* alpha, scalar_t* y,
                  int64_t rows, int64_t d, double tol) {
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    Candidates cand;
    std::vector<double> top;
    cand.z.reserve(d);
    cand.index.reserve(d);
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* xr = x + r * d;
      scalar_t* yr = y + r * d;
      std::fill(yr, yr + d, scalar_t(0));
      scalar_t m_s = -std::numeric_limits<scalar_t>::infinity();
      for (int64_t i = 0; i < d; ++i) m_s = xr[i] > m_s ? xr[i] : m_s;
      if (!(m_s > -std::numeric_limits<scalar_t>::infinity())) continue;  // fully masked row
      const double a = static_cast<double>(alpha[r]);
      const double am1 = a - 1.0, m = static_cast<double>(m_s);
      // z > 0  <=>  x > max - 1/(alpha - 1): a cheap comparison in the row's dtype,
      // slightly widened so that rounding cannot drop a candidate.
      const scalar_t cut = static_cast<scalar_t>(m - 1.0 / am1 - 1e-6 * (1.0 / am1 + std::abs(m)));
      cand.clear();
      for (int64_t i = 0; i < d; ++i) {
        if (xr[i] > cut) {
          const double z = am1 * (static_cast<double>(xr[i]) - m) + 1.0;
          if (z > 0.0) {
            cand.z.push_back(z);
            cand.index.push_back(i);
          }
        }
      }
      using math_t = math_type<scalar_t>;
      const double tau = row_threshold<math_t>(cand, top, a, tol);
      const double k = 1.0 / am1;
      for (size_t j = 0; j < cand.z.size(); ++j) {
        const double gap = cand.z[j] - tau;
        if (gap > 0.0) yr[cand.index[j]] = static_cast<scalar_t>(pow_km1<math_t>(gap, k) * gap);
      }
    }
  });
}

template <typename scalar_t>
void backward_rows(const scalar_t* y, const scalar_t* dy, const scalar_t* alpha,
                   scalar_t* dx, scalar_t* dalpha, int64_t rows, int64_t d) {
  using math_t = math_type<scalar_t>;
  at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
    std::vector<double> g(d);  // y^(2 - alpha) on the support, 0 elsewhere
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* yr = y + r * d;
      const scalar_t* dyr = dy + r * d;
      scalar_t* dxr = dx + r * d;
      const double a = static_cast<double>(alpha[r]);
      double g_sum = 0.0, gdy_sum = 0.0, ydy = 0.0, ent = 0.0, ylogy_dy = 0.0;
      for (int64_t i = 0; i < d; ++i) {
        const double yi = static_cast<double>(yr[i]);
        if (yi <= 0.0) {
          g[i] = 0.0;
          continue;
        }
        const double dyi = static_cast<double>(dyr[i]);
        // One log serves both y^(2 - alpha) and y log y.
        const double logy = (a == 2.0 && !dalpha) ? 0.0 : std::log(static_cast<math_t>(yi));
        const double gi = a == 2.0 ? 1.0
                          : (a == 1.5 ? std::sqrt(yi) : std::exp(static_cast<math_t>((2.0 - a) * logy)));
        g[i] = gi;
        g_sum += gi;
        gdy_sum += gi * dyi;
        if (dalpha) {
          ydy += yi * dyi;
          ent += yi * logy;
          ylogy_dy += yi * logy * dyi;
        }
      }
      const double q = g_sum > 0.0 ? gdy_sum / g_sum : 0.0;
      for (int64_t i = 0; i < d; ++i)
        dxr[i] = static_cast<scalar_t>(g[i] * (static_cast<double>(dyr[i]) - q));
      if (dalpha) {
        // dy . p~ = gdy_sum / g_sum = q, with p~ = g / sum g (see reference.backward).
        const double am1 = a - 1.0;
        dalpha[r] = static_cast<scalar_t>((ydy - q) / (am1 * am1) - (ylogy_dy - q * ent) / am1);
      }
    }
  });
}

void check_rows(const torch::Tensor& t, const char* name) {
  TORCH_CHECK(t.device().is_cpu(), name, " must be a CPU tensor");
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
  TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble,
              name, " must be float32 or float64");
}

}  // namespace

// x: (rows, d); alpha: (rows,) in (1, 2].  Returns y of the shape and dtype of x.
torch::Tensor entmax_forward(torch::Tensor x, torch::Tensor alpha, double tol) {
  check_rows(x, "x");
  check_rows(alpha, "alpha");
  TORCH_CHECK(x.dim() == 2 && alpha.numel() == x.size(0), "x must be (rows, d) and alpha (rows,)");
  auto y = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "entmax_forward", [&] {
    forward_rows<scalar_t>(x.data_ptr<scalar_t>(), alpha.data_ptr<scalar_t>(),
                           y.data_ptr<scalar_t>(), x.size(0), x.size(1), tol);
  });
  return y;
}

// Returns (dx, dalpha); dalpha is (rows,) or an empty tensor when not requested.
std::vector<torch::Tensor> entmax_backward(torch::Tensor y, torch::Tensor dy,
                                           torch::Tensor alpha, bool alpha_grad) {
  check_rows(y, "y");
  check_rows(dy, "grad_output");
  check_rows(alpha, "alpha");
  TORCH_CHECK(y.sizes() == dy.sizes() && alpha.numel() == y.size(0), "shape mismatch");
  auto dx = torch::empty_like(y);
  auto dalpha = alpha_grad ? torch::empty_like(alpha) : torch::Tensor();
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "entmax_backward", [&] {
    backward_rows<scalar_t>(y.data_ptr<scalar_t>(), dy.data_ptr<scalar_t>(),
                            alpha.data_ptr<scalar_t>(), dx.data_ptr<scalar_t>(),
                            alpha_grad ? dalpha.data_ptr<scalar_t>() : nullptr,
                            y.size(0), y.size(1));
  });
  return {dx, dalpha};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &entmax_forward, "alpha-entmax forward over rows (CPU)");
  m.def("backward", &entmax_backward, "alpha-entmax backward over rows (CPU)");
}
