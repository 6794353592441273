// `lockstep data preprocess|inspect|synth`: build and look at Megatron indexed datasets with the
// byte tokenizer (docs/design.md sections 5 and 6).
//   preprocess: .jsonl / .json inputs give one document per line from --json-key (a .json file
//     whose first non-blank byte is '[' is read as one JSON array of objects instead); any other
//     file is one document. Each document is byte-tokenized (NUL bytes dropped and counted), EOD
//     appended, and written as one sequence (uint16 tokens). Blank JSONL lines and documents
//     that are empty after tokenization are skipped and counted. Inputs are read in the order
//     given; documents keep their order.
//   inspect: counts, dtype, and the first tokens/text of one document.
//   synth: writes the built-in synthetic corpus as an indexed dataset and prints its entropies.
// Determinism contract: output files are a pure function of the input bytes and options.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/indexed_dataset.hpp"
#include "data/synthetic_corpus.hpp"
#include "data/tokenizer.hpp"
#include "launch/cli/commands.hpp"
#include "runtime/error.hpp"
#include "runtime/text.hpp"

namespace lockstep::cli {
namespace {

using data::ByteTokenizer;

struct PreprocessConfig {
  std::vector<std::string> inputs;
  std::string output_prefix;
  std::string json_key = "text";
};

struct InspectConfig {
  std::string prefix;
  int64_t doc = 0;
  int64_t count = 64;
};

struct SynthConfig {
  std::string output_prefix;
  uint64_t seed = 1234;
  int64_t bytes = 4 << 20;
};

struct PreprocessStats {
  int64_t documents = 0, tokens = 0, text_bytes = 0, dropped_nul = 0, skipped_empty = 0,
          blank_lines = 0;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

class DocumentWriter {
 public:
  explicit DocumentWriter(const std::string& prefix)
      : builder_(prefix, data::optimal_index_dtype(ByteTokenizer::kVocab)) {}
  void add(std::string_view text) {
    tokens_.clear();
    stats.text_bytes += int64_t(text.size());
    stats.dropped_nul += ByteTokenizer::encode(text, tokens_);
    if (tokens_.empty()) {
      ++stats.skipped_empty;
      return;
    }
    tokens_.push_back(ByteTokenizer::kEod);
    builder_.add_document(tokens_);
    ++stats.documents;
    stats.tokens += int64_t(tokens_.size());
  }
  void finalize() { builder_.finalize(); }
  PreprocessStats stats;

 private:
  data::IndexedDatasetBuilder builder_;
  std::vector<int32_t> tokens_;
};

std::string read_text_of(const nlohmann::json& obj, const std::string& key,
                         const std::string& where) {
  if (!obj.is_object())
    fail(where + ": expected a JSON object with a \"" + key + "\" key, got " + obj.type_name(),
         "each JSONL line must be an object like {\"" + key + "\": \"...\"}");
  const auto it = obj.find(key);
  if (it == obj.end())
    fail(where + ": no \"" + key + "\" key",
         "pass --json-key NAME to read another field (Megatron's --json-keys)");
  if (!it->is_string())
    fail(where + ": \"" + key + "\" is a " + std::string(it->type_name()) + ", not a string",
         "the text field must be a JSON string");
  return it->get<std::string>();
}

void add_json_file(const std::string& path, const std::string& key, DocumentWriter& w) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open " + path + ": " + std::strerror(errno), "check the --input path");
  // A .json file holding one array of objects.
  char first = 0;
  while (in.get(first) && std::isspace(static_cast<unsigned char>(first))) {
  }
  in.clear();
  in.seekg(0);
  if (ends_with(path, ".json") && first == '[') {
    nlohmann::json arr;
    try {
      arr = nlohmann::json::parse(in);
    } catch (const nlohmann::json::parse_error& e) {
      fail(path + ": bad JSON at byte " + std::to_string(e.byte) + ": " + e.what(),
           "fix the file, or write it as JSONL (one object per line)");
    }
    for (size_t i = 0; i < arr.size(); ++i)
      w.add(read_text_of(arr[i], key, path + ": element " + std::to_string(i)));
    return;
  }
  std::string line;
  int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r\n") == std::string::npos) {
      ++w.stats.blank_lines;
      continue;
    }
    nlohmann::json obj;
    try {
      obj = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      fail(path + ":" + std::to_string(lineno) + ": bad JSON: " + e.what(),
           "each line of a .jsonl file must be one JSON object");
    }
    w.add(read_text_of(obj, key, path + ":" + std::to_string(lineno)));
  }
  if (in.bad()) fail("cannot read " + path + ": " + std::strerror(errno));
}

void add_raw_file(const std::string& path, DocumentWriter& w) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot open " + path + ": " + std::strerror(errno), "check the --input path");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("cannot read " + path + ": " + std::strerror(errno));
  w.add(ss.str());
}

int run_preprocess(const PreprocessConfig& c) {
  DocumentWriter w(c.output_prefix);
  for (const std::string& in : c.inputs) {
    if (ends_with(in, ".jsonl") || ends_with(in, ".json"))
      add_json_file(in, c.json_key, w);
    else
      add_raw_file(in, w);
  }
  check(w.stats.documents > 0, "no documents: every input was empty",
        "check the --input files (and --json-key for JSON inputs)");
  w.finalize();
  const auto& s = w.stats;
  std::printf("preprocessed %zu input file(s) with the byte tokenizer (vocab 256, EOD = 0)\n",
              c.inputs.size());
  std::printf("  documents      : %lld\n", static_cast<long long>(s.documents));
  std::printf("  tokens         : %lld (including one EOD per document)\n",
              static_cast<long long>(s.tokens));
  std::printf("  text bytes     : %lld\n", static_cast<long long>(s.text_bytes));
  std::printf("  dropped NULs   : %lld\n", static_cast<long long>(s.dropped_nul));
  std::printf("  skipped empty  : %lld documents, %lld blank JSONL lines\n",
              static_cast<long long>(s.skipped_empty), static_cast<long long>(s.blank_lines));
  std::printf("  wrote          : %s (%s, uint16 tokens) and %s\n",
              data::bin_path(c.output_prefix).c_str(), human_bytes(s.tokens * 2).c_str(),
              data::idx_path(c.output_prefix).c_str());
  return 0;
}

int run_inspect(const InspectConfig& c) {
  data::IndexedDataset ds(c.prefix);
  std::printf("%s\n", ds.describe().c_str());
  std::printf("  dtype     : %s\n", data::index_dtype_name(ds.dtype()));
  std::printf("  documents : %lld\n", static_cast<long long>(ds.num_documents()));
  std::printf("  sequences : %lld\n", static_cast<long long>(ds.num_sequences()));
  std::printf("  tokens    : %lld\n", static_cast<long long>(ds.num_tokens()));
  if (ds.num_documents() == 0) return 0;
  check(c.doc >= 0 && c.doc < ds.num_documents(), "--doc " + std::to_string(c.doc) +
                                                      " is out of range [0, " +
                                                      std::to_string(ds.num_documents()) + ")");
  const auto [s0, s1] = ds.document_sequences(c.doc);
  std::vector<int32_t> toks;
  for (int64_t s = s0; s < s1; ++s) {
    const auto q = ds.sequence(s);
    toks.insert(toks.end(), q.begin(), q.end());
  }
  const int64_t n = std::min<int64_t>(c.count, int64_t(toks.size()));
  std::printf("document %lld: %zu tokens in %lld sequence(s); first %lld:\n  ",
              static_cast<long long>(c.doc), toks.size(), static_cast<long long>(s1 - s0),
              static_cast<long long>(n));
  for (int64_t i = 0; i < n; ++i) std::printf("%d ", toks[size_t(i)]);
  std::printf("\n  text: %s\n", nlohmann::json(ByteTokenizer::decode(toks.data(), n))
                                    .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
                                    .c_str());
  return 0;
}

int run_synth(const SynthConfig& c) {
  data::SyntheticCorpusConfig sc;
  sc.seed = c.seed;
  sc.bytes = c.bytes;
  const data::SyntheticCorpus corpus(sc);
  data::IndexedDatasetBuilder b(c.output_prefix, data::IndexDType::u16);
  const auto& bytes = corpus.bytes();
  std::vector<int32_t> doc;
  for (uint8_t t : bytes) {
    doc.push_back(t);
    if (t == ByteTokenizer::kEod) {
      b.add_document(doc);
      doc.clear();
    }
  }
  b.finalize();
  const data::ByteEntropy e = data::measure_byte_entropy(corpus);
  std::printf("%s: %lld documents, %lld tokens -> %s / %s\n", corpus.describe().c_str(),
              static_cast<long long>(corpus.num_documents()),
              static_cast<long long>(corpus.num_tokens()), data::bin_path(c.output_prefix).c_str(),
              data::idx_path(c.output_prefix).c_str());
  std::printf(
      "  byte entropy (nats): unigram %.3f, bigram joint %.3f, conditional %.3f "
      "(uniform: %.3f)\n",
      e.unigram, e.bigram_joint, e.conditional, std::log(256.0));
  return 0;
}

int guarded(const char* cmd, const std::function<int()>& f) {
  try {
    return f();
  } catch (const Error& e) {
    std::fprintf(stderr, "lockstep data %s: error: %s\n", cmd, e.what());
    return 1;
  }
}

}  // namespace

Runner add_data(CLI::App& app) {
  auto* data = app.add_subcommand("data", "build and inspect indexed datasets (byte tokenizer)");
  data->require_subcommand(1);

  auto pre = std::make_shared<PreprocessConfig>();
  auto* p = data->add_subcommand(
      "preprocess", "text / JSONL files -> PREFIX.bin + PREFIX.idx (Megatron indexed dataset)");
  p->add_option("--input", pre->inputs,
                "input file (repeatable); .jsonl/.json: one document per line, else one per file")
      ->required()
      ->check(CLI::ExistingFile);
  p->add_option("--output-prefix", pre->output_prefix, "writes PREFIX.bin and PREFIX.idx")
      ->required();
  p->add_option("--json-key", pre->json_key, "the JSON field holding a document's text")
      ->capture_default_str();

  auto ins = std::make_shared<InspectConfig>();
  auto* i = data->add_subcommand("inspect", "print counts and the start of one document");
  i->add_option("prefix", ins->prefix, "dataset prefix (without .bin / .idx)")->required();
  i->add_option("--doc", ins->doc, "document to show")->capture_default_str();
  i->add_option("--count", ins->count, "tokens to show")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);

  auto syn = std::make_shared<SynthConfig>();
  auto* s = data->add_subcommand("synth", "write the built-in synthetic corpus as a dataset");
  s->add_option("--output-prefix", syn->output_prefix, "writes PREFIX.bin and PREFIX.idx")
      ->required();
  s->add_option("--seed", syn->seed, "corpus seed")->capture_default_str();
  s->add_option("--bytes", syn->bytes, "corpus size in tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);

  return [=](int, char**) {
    if (p->parsed()) return guarded("preprocess", [&] { return run_preprocess(*pre); });
    if (i->parsed()) return guarded("inspect", [&] { return run_inspect(*ins); });
    return guarded("synth", [&] { return run_synth(*syn); });
  };
}

}  // namespace lockstep::cli
