#include "verify/compare.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "runtime/error.hpp"
#include "verify/op_trace.hpp"

namespace lockstep::verify {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// ---- reading ------------------------------------------------------------------------------
std::vector<json> read_jsonl(const std::string& path, bool required) {
  std::vector<json> out;
  std::ifstream in(path);
  if (!in) {
    check(!required, "cannot read '" + path + "'",
          "pass run directories written by `lockstep train` (they hold trace.jsonl)");
    return out;
  }
  std::string line;
  std::int64_t no = 0;
  while (std::getline(in, line)) {
    ++no;
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const std::exception& e) {
      fail("'" + path + "' line " + std::to_string(no) + " is not JSON: " + e.what(),
           "the file is damaged or was cut off; rerun that step");
    }
  }
  return out;
}

std::string text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

// One trace line as ordered (name, exact text) items plus the logged loss decimal.
struct Line {
  std::int64_t step = 0;
  std::vector<std::pair<std::string, std::string>> items;  // exact values
  std::string loss_hex, loss_dec;
};

// `fingerprints`: false when the two runs' fingerprints were made by different schemes; then
// only the exact scalars, other top-level keys and the scheme-independent "rng" and "data"
// hashes are items (the digest is over the fingerprints, so it is left out too).
Line parse_line(const json& j, const std::string& path, bool fingerprints) {
  check(j.is_object() && j.contains("step") && j["step"].is_number_integer(),
        "'" + path + "': a line without an integer \"step\"",
        "trace.jsonl lines come from `lockstep train`");
  Line l;
  l.step = j["step"].get<std::int64_t>();
  std::set<std::string> done{"step", "fp", "digest"};
  for (const std::string k : {"loss", "grad_norm", "lr"}) {
    if (!j.contains(k)) continue;
    const json& v = j[k];
    std::string exact, dec;
    if (v.is_object()) {
      exact = v.contains("hex") ? text(v["hex"]) : v.dump();
      dec = v.contains("dec") ? text(v["dec"]) : exact;
    } else {
      dec = text(v);
      exact = j.contains(k + "_hex") ? text(j[k + "_hex"]) : dec;
    }
    done.insert(k);
    done.insert(k + "_hex");
    l.items.emplace_back(k, exact);
    if (k == "loss") l.loss_hex = exact, l.loss_dec = dec;
  }
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!done.count(it.key())) l.items.emplace_back(it.key(), text(it.value()));
  if (j.contains("fp") && j["fp"].is_object())
    for (auto it = j["fp"].begin(); it != j["fp"].end(); ++it)
      if (fingerprints || it.key() == "rng" || it.key() == "data")
        l.items.emplace_back(it.key(), text(it.value()));
  if (j.contains("digest") && fingerprints) l.items.emplace_back("digest", text(j["digest"]));
  return l;
}

std::map<std::int64_t, Line> load_trace(const std::string& run, bool fingerprints) {
  const std::string path = run + "/trace.jsonl";
  check(fs::is_directory(run), "'" + run + "' is not a directory",
        "pass two run directories (run.out of each run)");
  std::map<std::int64_t, Line> out;
  for (const json& j : read_jsonl(path, true)) {
    Line l = parse_line(j, path, fingerprints);
    out[l.step] = std::move(l);  // a resumed run may repeat steps: the last line wins
  }
  check(!out.empty(), "'" + path + "' holds no steps", "did the run train at least one step?");
  return out;
}

std::map<std::int64_t, std::string> load_metrics_loss(const std::string& run) {
  std::map<std::int64_t, std::string> out;
  for (const json& j : read_jsonl(run + "/metrics.jsonl", false))
    if (j.is_object() && j.contains("step") && j.contains("loss"))
      out[j["step"].get<std::int64_t>()] = text(j["loss"]);
  return out;
}

bool parse_float(const std::string& s, float& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  out = std::strtof(s.c_str(), &end);
  return end && *end == '\0';
}

// Distance in units in the last place between two floats (0 for equal bits).
double ulps(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::memcmp(&a, &b, 4) == 0 ? 0 : 1e30;
  auto key = [](float x) {
    std::int32_t i;
    std::memcpy(&i, &x, 4);
    return i < 0 ? static_cast<std::int64_t>(INT32_MIN) - i : static_cast<std::int64_t>(i);
  };
  return std::fabs(static_cast<double>(key(a) - key(b)));
}

std::string rounded4(const std::string& s) {
  float v;
  if (!parse_float(s, v)) return s;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4f", static_cast<double>(v));
  return buf;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string join(const std::vector<std::string>& v, const std::string& sep, std::size_t max) {
  std::string o;
  for (std::size_t i = 0; i < v.size() && i < max; ++i) o += (i ? sep : "") + v[i];
  if (v.size() > max) o += sep + "... (" + std::to_string(v.size() - max) + " more)";
  return o;
}

std::string op_base(const std::string& op_occ) {
  return op_occ.substr(0, op_occ.rfind('#'));
}

}  // namespace

int phase_of(const std::string& n) {
  auto starts = [&](const char* p) { return n.rfind(p, 0) == 0; };
  if (n == "lr" || n == "tokens" || starts("data") || starts("rng")) return 0;
  if (n == "loss" || starts("loss")) return 1;
  if (starts("grad/")) return 2;
  if (n == "grad_norm" || starts("reduced") || starts("grad_reduced")) return 3;
  if (starts("adam_m/") || starts("adam_v/") || starts("adam")) return 4;
  if (starts("param/")) return 5;
  return 6;
}

const char* phase_name(int p) {
  static const char* names[] = {"data/schedule",   "forward/loss", "gradients", "reduced gradients",
                                "optimizer state", "parameters",   "other"};
  return names[std::clamp(p, 0, 6)];
}

// ---- op traces ------------------------------------------------------------------------------
std::map<int, std::vector<OpRecord>> load_op_records(const std::string& ops_dir,
                                                     std::int64_t step) {
  std::map<int, std::vector<OpRecord>> out;
  if (!fs::is_directory(ops_dir)) return out;
  for (const auto& e : fs::directory_iterator(ops_dir)) {
    const std::string f = e.path().filename().string();
    int rank = -1;
    char tail = 0;
    if (std::sscanf(f.c_str(), "rank_%d.jsonl%c", &rank, &tail) != 1 || rank < 0) continue;
    if (f != op_trace_file_name(rank)) continue;
    for (const json& j : read_jsonl(e.path().string(), true)) {
      if (!j.contains("step") || j["step"].get<std::int64_t>() != step) continue;
      OpRecord r;
      r.op = j.at("op").get<std::string>();
      r.occ = j.value("occ", std::int64_t{0});
      for (const auto& h : j.at("in")) r.in.push_back(text(h));
      r.out = text(j.at("out"));
      r.n = j.value("n", std::int64_t{0});
      out[rank].push_back(std::move(r));
    }
    if (out.count(rank) && out[rank].empty()) out.erase(rank);
  }
  return out;
}

OpDiff compare_op_traces(const std::string& ops_a, const std::string& ops_b, std::int64_t step) {
  OpDiff d;
  d.step = step;
  const auto A = load_op_records(ops_a, step), B = load_op_records(ops_b, step);
  if (A.empty() || B.empty()) {
    d.note = std::string("no op records of step ") + std::to_string(step) + " in " +
             (A.empty() ? ops_a : ops_b);
    return d;
  }
  if (A.size() != B.size())
    d.note = "the runs traced different rank counts (" + std::to_string(A.size()) + " vs " +
             std::to_string(B.size()) + "): ops compare rank by rank, meaningful for equal layouts";
  std::map<std::string, int> origin_count;
  for (const auto& [rank, ra] : A) {
    auto it = B.find(rank);
    if (it == B.end()) continue;
    d.available = true;
    RankOpDiff r;
    r.rank = rank;
    std::map<std::pair<std::string, std::int64_t>, const OpRecord*> bmap;
    for (const auto& rec : it->second) bmap[{rec.op, rec.occ}] = &rec;
    std::set<std::pair<std::string, std::int64_t>> seen;
    for (const auto& a : ra) {
      auto bi = bmap.find({a.op, a.occ});
      if (bi == bmap.end()) {
        ++r.only_a;
        continue;
      }
      seen.insert(bi->first);
      ++r.compared;
      const OpRecord& b = *bi->second;
      if (a.out == b.out && a.n == b.n) continue;
      ++r.differing;
      const std::string name = a.op + "#" + std::to_string(a.occ);
      if (a.in == b.in) {
        if (!r.origin)
          r.origin = name;
        else
          r.other_origins.push_back(name);
      } else {
        r.receivers.push_back(name);
      }
    }
    r.only_b = static_cast<std::int64_t>(it->second.size() - seen.size());
    if (r.origin) ++origin_count[op_base(*r.origin)];
    d.ranks.push_back(std::move(r));
  }
  // The origin found on the most ranks; a tie goes to the one found on the lowest rank.
  int best = 0;
  for (const auto& r : d.ranks)
    if (r.origin && origin_count[op_base(*r.origin)] > best)
      best = origin_count[op_base(*r.origin)], d.origin_op = op_base(*r.origin);
  for (const auto& r : d.ranks)
    if (r.origin && op_base(*r.origin) == d.origin_op) d.origin_ranks.push_back(r.rank);
  return d;
}

// ---- state traces ---------------------------------------------------------------------------
CompareReport compare_runs(const std::string& run_a, const std::string& run_b,
                           const std::string& scheme_a, const std::string& scheme_b) {
  CompareReport R;
  R.run_a = run_a;
  R.run_b = run_b;
  R.scheme_a = scheme_a;
  R.scheme_b = scheme_b;
  const bool fps = R.fingerprints_comparable();
  const auto A = load_trace(run_a, fps), B = load_trace(run_b, fps);
  const auto MA = load_metrics_loss(run_a), MB = load_metrics_loss(run_b);
  R.steps_a = static_cast<std::int64_t>(A.size());
  R.steps_b = static_cast<std::int64_t>(B.size());
  for (const auto& [step, la] : A) {
    auto bi = B.find(step);
    if (bi == B.end()) continue;
    const Line& lb = bi->second;
    ++R.common;
    StepDiff sd;
    sd.step = step;
    std::map<std::string, std::string> bv(lb.items.begin(), lb.items.end());
    std::set<std::string> in_a;
    for (const auto& [name, va] : la.items) {
      in_a.insert(name);
      auto it = bv.find(name);
      const std::string vb = it == bv.end() ? "(absent)" : it->second;
      if (va != vb) sd.items.push_back({name, phase_of(name), va, vb});
    }
    for (const auto& [name, vb] : lb.items)
      if (!in_a.count(name)) sd.items.push_back({name, phase_of(name), "(absent)", vb});
    std::stable_sort(sd.items.begin(), sd.items.end(),
                     [](const TensorDiff& x, const TensorDiff& y) { return x.phase < y.phase; });
    sd.differs = !sd.items.empty();
    // Loss: bits (hex), the logged decimal, and a 4-decimal console rounding.
    const std::string log_a = MA.count(step) ? MA.at(step) : la.loss_dec;
    const std::string log_b = MB.count(step) ? MB.at(step) : lb.loss_dec;
    float fa = 0, fb = 0;
    const bool pa = parse_float(la.loss_hex, fa), pb = parse_float(lb.loss_hex, fb);
    R.steps.push_back(step);
    R.loss_ulps.push_back(pa && pb ? ulps(fa, fb) : (la.loss_hex == lb.loss_hex ? 0 : 1));
    R.n_differing.push_back(static_cast<int>(sd.items.size()));
    if (la.loss_hex != lb.loss_hex && !R.first_loss_bits_step) R.first_loss_bits_step = step;
    if (log_a != log_b && !R.first_loss_logged_step) R.first_loss_logged_step = step;
    if (rounded4(log_a) != rounded4(log_b) && !R.first_loss_rounded_step)
      R.first_loss_rounded_step = step;
    if (sd.differs) {
      R.divergent_steps.push_back(step);
      if (!R.first_step) {
        R.first_step = step;
        R.loss_bits_equal_at_first = la.loss_hex == lb.loss_hex;
        R.loss_logged_equal_at_first = log_a == log_b;
        R.first = std::move(sd);
      }
    }
  }
  check(R.common > 0, "'" + run_a + "' and '" + run_b + "' have no step in common",
        "compare runs of the same job (overlapping step ranges)");
  if (R.first_step) R.ops = compare_op_traces(run_a + "/ops", run_b + "/ops", *R.first_step);
  return R;
}

// ---- output ---------------------------------------------------------------------------------
std::string CompareReport::to_text() const {
  std::ostringstream o;
  o << "verify compare\n  A: " << run_a << " (" << steps_a << " steps)\n  B: " << run_b << " ("
    << steps_b << " steps)\n";
  for (const auto& d : contract_differences)
    o << "note: the runs differ in the numerical contract: " << d
      << " (docs/design.md section 2), so their bits are not expected to agree\n";
  if (!fingerprints_comparable())
    o << "note: A's fingerprints are " << scheme_a << ", B's " << scheme_b
      << ": not comparable, so only the exact scalars and the rng/data hashes are compared "
         "(rerun one with --set verify.hash=... / verify.fingerprint_version=... to match)\n";
  if (!first_step) {
    o << "identical: all " << common << " common steps have the same bits (loss, grad_norm, lr"
      << (fingerprints_comparable() ? ", every fingerprint, digest)\n" : ")\n");
    if (steps_a != steps_b) o << "but the runs have different lengths: DIFFERENT\n";
    return o.str();
  }
  const std::int64_t s = *first_step;
  o << "DIFFERENT: " << divergent_steps.size() << " of " << common << " common steps differ\n\n";
  o << "1. first divergent step: " << s << "\n";
  o << "   loss bits at step " << s << ": " << (loss_bits_equal_at_first ? "equal" : "differ")
    << "; logged loss: " << (loss_logged_equal_at_first ? "equal" : "differs") << "\n";
  if (hidden()) o << "   HIDDEN DIVERGENCE: the state differs while the logged loss agrees\n";
  auto at = [](const std::optional<std::int64_t>& v) {
    return v ? "step " + std::to_string(*v) : std::string("never");
  };
  o << "   loss bits first differ: " << at(first_loss_bits_step)
    << "; logged loss: " << at(first_loss_logged_step)
    << "; loss to 4 decimals: " << at(first_loss_rounded_step) << "\n\n";
  o << "2. state at step " << s << " (phase order):\n";
  int last_phase = -1;
  std::vector<std::string> names;
  auto flush = [&]() {
    if (last_phase >= 0)
      o << "   " << phase_name(last_phase) << " (" << names.size() << "): " << join(names, ", ", 6)
        << "\n";
    names.clear();
  };
  for (const auto& t : first.items) {
    if (t.phase != last_phase) flush(), last_phase = t.phase;
    names.push_back(t.name);
  }
  flush();
  if (!first.items.empty()) {
    const auto& t = first.items.front();
    o << "   first: " << phase_name(t.phase) << " / " << t.name << "  A " << t.a << "  B " << t.b
      << "\n";
  }
  o << "\n3. ops at step " << s << ": ";
  if (!ops.available) {
    o << "no op traces (" << ops.note << ")\n   to find the op: lockstep verify bisect " << run_a
      << " " << run_b << "  (or rerun both with --set verify.ops=" << s << "-" << s << ")\n";
  } else {
    o << "\n";
    if (!ops.note.empty()) o << "   note: " << ops.note << "\n";
    o << "   rank  compared  differing  origin (inputs equal, output differs)   receivers\n";
    for (const auto& r : ops.ranks) {
      char line[512];
      std::snprintf(line, sizeof line, "   %4d  %8lld  %9lld  %-40s %zu", r.rank,
                    static_cast<long long>(r.compared), static_cast<long long>(r.differing),
                    r.origin ? r.origin->c_str() : "-", r.receivers.size());
      o << line << "\n";
      if (!r.other_origins.empty())
        o << "         also with equal inputs: " << join(r.other_origins, ", ", 4) << "\n";
      if (!r.receivers.empty()) o << "         receivers: " << join(r.receivers, ", ", 4) << "\n";
    }
    if (!ops.origin_op.empty()) {
      std::vector<std::string> rs;
      for (int r : ops.origin_ranks) rs.push_back(std::to_string(r));
      o << "   origin: " << ops.origin_op << " on rank(s) " << join(rs, ",", 64) << "\n";
    } else {
      o << "   no op with equal inputs and a different output: the divergence entered before "
           "the traced ops (data, optimizer, or an op that is not recorded)\n";
    }
  }
  return o.str();
}

nlohmann::ordered_json CompareReport::to_json() const {
  nlohmann::ordered_json j;
  j["identical"] = identical();
  j["run_a"] = run_a;
  j["run_b"] = run_b;
  j["steps_a"] = steps_a;
  j["steps_b"] = steps_b;
  j["common_steps"] = common;
  j["fingerprint_scheme_a"] = scheme_a;
  j["fingerprint_scheme_b"] = scheme_b;
  j["fingerprints_compared"] = fingerprints_comparable();
  auto opt = [](const std::optional<std::int64_t>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  j["first_divergent_step"] = opt(first_step);
  j["divergent_steps"] = divergent_steps;
  nlohmann::ordered_json loss;
  loss["bits_equal_at_first"] = loss_bits_equal_at_first;
  loss["logged_equal_at_first"] = loss_logged_equal_at_first;
  loss["hidden_divergence"] = hidden();
  loss["first_bits_step"] = opt(first_loss_bits_step);
  loss["first_logged_step"] = opt(first_loss_logged_step);
  loss["first_rounded4_step"] = opt(first_loss_rounded_step);
  j["loss"] = loss;
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  for (const auto& t : first.items)
    items.push_back({{"name", t.name}, {"phase", phase_name(t.phase)}, {"a", t.a}, {"b", t.b}});
  j["first_phase"] = first.items.empty() ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(phase_name(first.items[0].phase));
  j["first_tensor"] = first.items.empty() ? nlohmann::ordered_json(nullptr)
                                          : nlohmann::ordered_json(first.items[0].name);
  j["differing"] = items;
  j["contract_differences"] = contract_differences;
  nlohmann::ordered_json o;
  o["available"] = ops.available;
  o["note"] = ops.note;
  o["origin_op"] = ops.origin_op.empty() ? nlohmann::ordered_json(nullptr)
                                         : nlohmann::ordered_json(ops.origin_op);
  o["origin_ranks"] = ops.origin_ranks;
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const auto& r : ops.ranks)
    ranks.push_back({{"rank", r.rank},
                     {"compared", r.compared},
                     {"differing", r.differing},
                     {"only_a", r.only_a},
                     {"only_b", r.only_b},
                     {"origin", r.origin ? nlohmann::ordered_json(*r.origin) : nullptr},
                     {"other_origins", r.other_origins},
                     {"receivers", r.receivers}});
  o["ranks"] = ranks;
  j["ops"] = o;
  nlohmann::ordered_json per = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < steps.size(); ++i)
    per.push_back({{"step", steps[i]}, {"loss_ulps", loss_ulps[i]}, {"differing", n_differing[i]}});
  j["per_step"] = per;
  return j;
}

std::string CompareReport::to_html() const {
  std::ostringstream h;
  h << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>lockstep verify compare</title>"
       "<style>body{font-family:sans-serif;margin:24px;color:#222}h1{font-size:20px}"
       "h2{font-size:16px;margin-top:22px}table{border-collapse:collapse;font-size:13px}"
       "td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}code{font-size:12px}"
       ".ok{color:#17803d;font-weight:bold}.bad{color:#b42318;font-weight:bold}</style></"
       "head><body>";
  h << "<h1>lockstep verify compare</h1><p>A: <code>" << html_escape(run_a) << "</code> ("
    << steps_a << " steps)<br>B: <code>" << html_escape(run_b) << "</code> (" << steps_b
    << " steps)</p>";
  if (!fingerprints_comparable())
    h << "<p>Note: A's fingerprints are " << html_escape(scheme_a) << ", B's "
      << html_escape(scheme_b) << ": not comparable; only the exact scalars are compared.</p>";
  if (identical())
    h << "<p class=\"ok\">IDENTICAL: all " << common << " steps have the same bits.</p>";
  else if (first_step)
    h << "<p class=\"bad\">DIFFERENT from step " << *first_step << " (" << divergent_steps.size()
      << " of " << common << " common steps differ)"
      << (hidden() ? " &mdash; hidden divergence: the logged loss still agrees there" : "")
      << ".</p>";
  else
    h << "<p class=\"bad\">DIFFERENT lengths; the common steps are identical.</p>";

  // Plot: per step, log2(1 + ulp distance of the loss) as bars; a dot per step, red where the
  // state differs.
  const int W = 760, H = 240, L = 50, Rm = 36, T = 20, Bm = 40;
  const std::size_t n = steps.size();
  double ymax = 1;
  for (double u : loss_ulps) ymax = std::max(ymax, std::log2(1 + u));
  ymax = std::ceil(ymax);
  h << "<h2>Difference per step</h2><svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << W
    << "\" height=\"" << H << "\" viewBox=\"0 0 " << W << " " << H << "\">";
  h << "<rect x=\"0\" y=\"0\" width=\"" << W << "\" height=\"" << H << "\" fill=\"#fff\"/>";
  const double pw = W - L - Rm, ph = H - T - Bm;
  h << "<line x1=\"" << L << "\" y1=\"" << T + ph << "\" x2=\"" << L + pw << "\" y2=\"" << T + ph
    << "\" stroke=\"#333\"/><line x1=\"" << L << "\" y1=\"" << T << "\" x2=\"" << L << "\" y2=\""
    << T + ph << "\" stroke=\"#333\"/>";
  // Ticks at whole powers of two: label 2^v - 1 ulps at height v.
  const int tick_step = std::max(1, static_cast<int>(ymax) / 4);
  for (int v = 0; v <= static_cast<int>(ymax); v += tick_step) {
    const double y = T + ph - ph * v / ymax;
    h << "<text x=\"" << L - 6 << "\" y=\"" << y + 4 << "\" font-size=\"11\" text-anchor=\"end\">"
      << static_cast<long long>(std::llround(std::exp2(v) - 1)) << "</text>";
  }
  h << "<text x=\"12\" y=\"" << T + ph / 2 << "\" font-size=\"11\" transform=\"rotate(-90 12 "
    << T + ph / 2 << ")\" text-anchor=\"middle\">loss |A-B| in ulps (log scale)</text>";
  const double bw = n ? pw / static_cast<double>(n) : pw;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = L + bw * static_cast<double>(i);
    const double v = std::log2(1 + loss_ulps[i]) / ymax * ph;
    if (v > 0)
      h << "<rect x=\"" << x + bw * 0.15 << "\" y=\"" << T + ph - v << "\" width=\"" << bw * 0.7
        << "\" height=\"" << v << "\" fill=\"#d9822b\"/>";
    h << "<circle cx=\"" << x + bw / 2 << "\" cy=\"" << T + ph + 10 << "\" r=\"4\" fill=\""
      << (n_differing[i] ? "#b42318" : "#17803d") << "\"><title>step " << steps[i] << ": "
      << n_differing[i] << " differing items, loss " << loss_ulps[i] << " ulps</title></circle>";
    if (n <= 40 || i % (n / 20 + 1) == 0)
      h << "<text x=\"" << x + bw / 2 << "\" y=\"" << T + ph + 30
        << "\" font-size=\"10\" text-anchor=\"middle\">" << steps[i] << "</text>";
  }
  // Line: differing state items per step (right scale).
  int dmax = 1;
  for (int v : n_differing) dmax = std::max(dmax, v);
  std::string pts;
  for (std::size_t i = 0; i < n; ++i)
    pts += std::to_string(L + bw * (static_cast<double>(i) + 0.5)) + "," +
           std::to_string(T + ph - ph * n_differing[i] / dmax) + " ";
  h << "<polyline points=\"" << pts << "\" fill=\"none\" stroke=\"#b42318\" stroke-width=\"1.5\"/>";
  h << "<text x=\"" << L + pw + 4 << "\" y=\"" << T + 4 << "\" font-size=\"11\" fill=\"#b42318\">"
    << dmax << "</text><text x=\"" << L + pw + 4 << "\" y=\"" << T + ph + 4
    << "\" font-size=\"11\" fill=\"#b42318\">0</text>";
  h << "</svg><p style=\"font-size:12px\">orange bars: loss difference (ulps, left scale); red "
       "line: "
       "differing state items (fingerprints and scalars, right scale); dots: state identical "
       "(green) or different (red) at that step.</p>";

  // First-divergence path.
  h << "<h2>First-divergence path</h2>";
  std::vector<std::pair<std::string, std::string>> path;
  if (first_step) {
    path.push_back({"step", std::to_string(*first_step) + (hidden() ? " (hidden)" : "")});
    if (!first.items.empty()) {
      path.push_back({"phase", phase_name(first.items[0].phase)});
      path.push_back({"tensor", first.items[0].name});
    }
    if (ops.available && !ops.origin_op.empty()) {
      std::string rs;
      for (int r : ops.origin_ranks) {
        if (!rs.empty()) rs += ',';
        rs += std::to_string(r);
      }
      path.push_back({"origin op", ops.origin_op});
      path.push_back({"rank(s)", rs});
    } else {
      path.push_back(
          {"origin op", ops.available ? "none found" : "no op trace: run verify bisect"});
    }
  }
  if (path.empty()) {
    h << "<p>none (identical)</p>";
  } else {
    const int bx = 150, gap = 20, bh = 54;
    const int pwid = static_cast<int>(path.size()) * (bx + gap);
    h << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << pwid << "\" height=\"" << bh + 10
      << "\">";
    for (std::size_t i = 0; i < path.size(); ++i) {
      const int x = static_cast<int>(i) * (bx + gap) + 2;
      h << "<rect x=\"" << x << "\" y=\"4\" rx=\"6\" width=\"" << bx << "\" height=\"" << bh
        << "\" fill=\"#fdecea\" stroke=\"#b42318\"/><text x=\"" << x + 8
        << "\" y=\"22\" font-size=\"11\" fill=\"#666\">" << html_escape(path[i].first)
        << "</text><text x=\"" << x + 8 << "\" y=\"42\" font-size=\"11\">"
        << html_escape(path[i].second.size() > 24 ? path[i].second.substr(0, 23) + "…"
                                                  : path[i].second)
        << "<title>" << html_escape(path[i].second) << "</title></text>";
      if (i + 1 < path.size())
        h << "<line x1=\"" << x + bx << "\" y1=\"" << 4 + bh / 2 << "\" x2=\"" << x + bx + gap - 4
          << "\" y2=\"" << 4 + bh / 2 << "\" stroke=\"#333\" stroke-width=\"2\"/>";
    }
    h << "</svg>";
  }
  if (first_step && !first.items.empty()) {
    h << "<h2>Differing state at step " << *first_step
      << "</h2><table><tr><th>phase</th>"
         "<th>name</th><th>A</th><th>B</th></tr>";
    std::size_t shown = 0;
    for (const auto& t : first.items) {
      if (++shown > 40) break;
      h << "<tr><td>" << phase_name(t.phase) << "</td><td><code>" << html_escape(t.name)
        << "</code></td><td><code>" << html_escape(t.a) << "</code></td><td><code>"
        << html_escape(t.b) << "</code></td></tr>";
    }
    h << "</table>";
    if (first.items.size() > 40) h << "<p>... " << first.items.size() - 40 << " more</p>";
  }
  if (ops.available) {
    h << "<h2>Ops at step " << ops.step
      << "</h2><table><tr><th>rank</th><th>compared</th>"
         "<th>differing</th><th>origin</th><th>receivers</th></tr>";
    for (const auto& r : ops.ranks)
      h << "<tr><td>" << r.rank << "</td><td>" << r.compared << "</td><td>" << r.differing
        << "</td><td><code>" << html_escape(r.origin ? *r.origin : "-") << "</code></td><td>"
        << r.receivers.size() << ": <code>" << html_escape(join(r.receivers, ", ", 5))
        << "</code></td></tr>";
    h << "</table>";
  }
  h << "</body></html>\n";
  return h.str();
}

}  // namespace lockstep::verify
