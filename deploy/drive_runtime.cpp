// drive_runtime: run an exported `drive` lane-keeping policy on camera frames, in C++.
//
//   drive_runtime MODEL FRAMES [--device auto|cpu|cuda] [--warmup N] [--threads N]
//                 [--fps F] [--no-pace] [--out commands.csv] [--quiet]
//
// MODEL   policy.ts  (TorchScript, `drive export --format torchscript`) or
//         policy.pt2 (AOTInductor package, `drive export --format aoti`).
// FRAMES  a folder of binary PPM images (P6, 8-bit RGB, read in file-name order) or one raw file
//         of consecutive uint8 RGB frames (height*width*3 bytes each, HWC). Both carry the
//         camera's native resolution; the model crops, resizes and normalises inside.
//         `python deploy/run_policy.py ... --dump-ppm DIR` writes a video or recording as PPMs.
//
// The model is stateless: its hidden tensor [1, S] carries the recurrent state, the last command,
// the status flags of the last step and the time since the last usable frame; we hold it between
// steps. Each step prints `frame,curvature_per_m,status,latency_ms` (status bit flags: see
// deploy/README.md) and the run ends with latency p50/p99. Frames are paced at the camera rate
// (fps from the model's metadata) unless --no-pace. Latency covers host->device copy, the model
// and reading the command back to the host, i.e. what the vehicle waits for.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <ATen/Parallel.h>
#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- model metadata and interface
struct Meta {
  int64_t height = 0, width = 0;  // native camera frame size the model expects
  int64_t hidden_size = 0;        // width S of the hidden tensor [1, S]
  double fps = 0.0;               // camera rate; dt = 1 / fps inside the model
  double curvature_limit_per_m = 0.0;
  bool half = false;              // conv head in fp16
  std::string family, format, device, json;
};

struct StepOut {
  at::Tensor curvature, hidden, status;
};

class Runner {
 public:
  virtual ~Runner() = default;
  virtual StepOut step(const at::Tensor& frame, const at::Tensor& hidden) = 0;
  at::Tensor initial_state() const {
    return torch::zeros({1, meta.hidden_size}, torch::dtype(torch::kFloat32).device(device));
  }
  // Inputs are checked here too: an AOTInductor package accepts wrong shapes silently.
  void validate(const at::Tensor& frame, const at::Tensor& hidden) const {
    if (frame.dim() != 4 || frame.size(0) != 1 || frame.size(1) != meta.height ||
        frame.size(2) != meta.width || frame.size(3) != 3)
      throw std::runtime_error("frame must be [1, " + std::to_string(meta.height) + ", " +
                               std::to_string(meta.width) + ", 3], got " + shape(frame));
    if (frame.scalar_type() != torch::kUInt8)
      throw std::runtime_error("frame must be uint8 RGB, got " + std::string(c10::toString(frame.scalar_type())));
    if (hidden.dim() != 2 || hidden.size(0) != 1 || hidden.size(1) != meta.hidden_size ||
        hidden.scalar_type() != torch::kFloat32)
      throw std::runtime_error("hidden must be float32 [1, " + std::to_string(meta.hidden_size) + "], got " +
                               shape(hidden));
  }
  Meta meta;
  torch::Device device = torch::kCPU;

 private:
  static std::string shape(const at::Tensor& t) {
    std::string s = "[";
    for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
    return s + "]";
  }
};

class TorchScriptRunner : public Runner {
 public:
  TorchScriptRunner(const std::string& path, torch::Device dev) {
    device = dev;
    module_ = torch::jit::load(path, dev);
    module_.eval();
    meta.height = module_.attr("frame_height").toInt();
    meta.width = module_.attr("frame_width").toInt();
    meta.hidden_size = module_.attr("hidden_size").toInt();
    meta.fps = module_.attr("fps").toDouble();
    meta.curvature_limit_per_m = module_.attr("curvature_limit_per_m").toDouble();
    meta.half = module_.attr("half").toBool();
    meta.family = module_.attr("family").toStringRef();
    meta.json = module_.run_method("metadata").toStringRef();
    meta.format = "torchscript";
    meta.device = dev.str();
    // Specialise to this process, never saved (docs/deploy.md): oneDNN convolutions on CPU, then
    // freeze (parameters become constants, everything derived from them is folded once). The
    // list matches drive.export.runtime.PRESERVED.
    if (module_.hasattr("head")) {
      auto head = module_.attr("head").toModule();
      if (head.hasattr("use_mkldnn")) head.setattr("use_mkldnn", dev.is_cpu() && at::hasMKLDNN());
    }
    std::vector<std::string> keep;
    for (const char* name : {"step", "step_with_status", "initial_state", "metadata", "frame_height", "frame_width",
                             "state_size", "hidden_size", "fps", "period_s", "curvature_limit_per_m", "half",
                             "black_level", "max_gap_s", "family", "metadata_json", "crop", "model_size"}) {
      if (module_.hasattr(name) || module_.find_method(name)) keep.emplace_back(name);
    }
    module_ = torch::jit::freeze(module_, keep);
  }
  StepOut step(const at::Tensor& frame, const at::Tensor& hidden) override {
    validate(frame, hidden);
    auto out = module_.get_method("step_with_status")({frame, hidden}).toTuple();
    return {out->elements()[0].toTensor(), out->elements()[1].toTensor(), out->elements()[2].toTensor()};
  }

 private:
  torch::jit::Module module_;
};

class AOTIRunner : public Runner {
 public:
  explicit AOTIRunner(const std::string& path) : loader_(path) {
    auto m = loader_.get_metadata();
    auto need = [&](const std::string& k) {
      auto it = m.find(k);
      if (it == m.end()) throw std::runtime_error("package metadata lacks '" + k + "': not a drive export?");
      return it->second;
    };
    meta.height = std::stoll(need("frame_height"));
    meta.width = std::stoll(need("frame_width"));
    meta.hidden_size = std::stoll(need("hidden_size"));
    meta.fps = std::stod(need("fps"));
    meta.curvature_limit_per_m = std::stod(need("curvature_limit_per_m"));
    meta.half = need("half") == "true";
    meta.family = need("family");
    meta.json = need("metadata_json");
    meta.device = need("device");
    meta.format = "aoti";
    device = torch::Device(meta.device == "cuda" ? "cuda:0" : "cpu");
  }
  StepOut step(const at::Tensor& frame, const at::Tensor& hidden) override {
    validate(frame, hidden);
    auto out = loader_.run({frame, hidden});
    if (out.size() != 3) throw std::runtime_error("package returned " + std::to_string(out.size()) + " outputs, want 3");
    return {out[0], out[1], out[2]};
  }

 private:
  torch::inductor::AOTIModelPackageLoader loader_;
};

// ---------------------------------------------------------------- frame sources
// Reads one binary PPM (P6, maxval 255) into HWC RGB bytes.
static std::vector<uint8_t> read_ppm(const fs::path& path, int64_t& h, int64_t& w) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path.string());
  auto token = [&]() {
    std::string t;
    char c;
    while (f.get(c)) {
      if (c == '#') {
        std::string line;
        std::getline(f, line);
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        if (!t.empty()) break;
      } else {
        t += c;
      }
    }
    return t;
  };
  if (token() != "P6") throw std::runtime_error(path.string() + ": not a binary PPM (P6)");
  w = std::stoll(token());
  h = std::stoll(token());
  if (std::stoll(token()) != 255) throw std::runtime_error(path.string() + ": only 8-bit PPM (maxval 255)");
  std::vector<uint8_t> data(static_cast<size_t>(h * w * 3));
  f.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size()));
  if (f.gcount() != static_cast<std::streamsize>(data.size())) throw std::runtime_error(path.string() + ": truncated");
  return data;
}

class FrameSource {
 public:
  FrameSource(const std::string& path, int64_t height, int64_t width) : h_(height), w_(width) {
    if (fs::is_directory(path)) {
      for (const auto& e : fs::directory_iterator(path))
        if (e.path().extension() == ".ppm") files_.push_back(e.path());
      std::sort(files_.begin(), files_.end());
      if (files_.empty()) throw std::runtime_error(path + ": no .ppm frames");
      count_ = files_.size();
    } else {
      raw_.open(path, std::ios::binary);
      if (!raw_) throw std::runtime_error("cannot open " + path);
      const auto bytes = fs::file_size(path);
      const auto frame = static_cast<uintmax_t>(h_ * w_ * 3);
      if (bytes == 0 || bytes % frame != 0)
        throw std::runtime_error(path + ": " + std::to_string(bytes) + " bytes is not a whole number of " +
                                 std::to_string(h_) + "x" + std::to_string(w_) + "x3 frames");
      count_ = bytes / frame;
    }
  }
  size_t size() const { return count_; }
  // Frame i as a uint8 tensor [1, H, W, 3] on the host.
  at::Tensor frame(size_t i) {
    std::vector<uint8_t> data;
    if (!files_.empty()) {
      int64_t h = 0, w = 0;
      data = read_ppm(files_[i], h, w);
      if (h != h_ || w != w_)
        throw std::runtime_error(files_[i].string() + ": frame is " + std::to_string(w) + "x" + std::to_string(h) +
                                 ", the model expects the camera's " + std::to_string(w_) + "x" + std::to_string(h_));
    } else {
      data.resize(static_cast<size_t>(h_ * w_ * 3));
      raw_.seekg(static_cast<std::streamoff>(i * data.size()));
      raw_.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(data.size()));
    }
    return torch::from_blob(data.data(), {1, h_, w_, 3}, torch::kUInt8).clone();
  }

 private:
  int64_t h_, w_;
  std::vector<fs::path> files_;
  std::ifstream raw_;
  size_t count_ = 0;
};

// ---------------------------------------------------------------- main loop
struct Options {
  std::string model, frames, device = "auto", out;
  int warmup = 20, threads = 1;
  double fps = 0.0;
  bool pace = true, quiet = false;
};

static void usage() {
  std::cerr << "usage: drive_runtime MODEL(.ts|.pt2) FRAMES(dir of .ppm | raw .rgb file)\n"
               "       [--device auto|cpu|cuda] [--warmup N] [--threads N] [--fps F] [--no-pace]\n"
               "       [--out commands.csv] [--quiet]\n";
}

static Options parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return std::string(argv[++i]);
    };
    if (a == "--device") o.device = value();
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--fps") o.fps = std::stod(value());
    else if (a == "--out") o.out = value();
    else if (a == "--no-pace") o.pace = false;
    else if (a == "--quiet") o.quiet = true;
    else if (a == "-h" || a == "--help") throw std::invalid_argument("");
    else if (!a.empty() && a[0] == '-') throw std::invalid_argument("unknown option " + a);
    else pos.push_back(a);
  }
  if (pos.size() != 2) throw std::invalid_argument("need MODEL and FRAMES");
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw std::invalid_argument("--device must be auto, cpu or cuda");
  o.model = pos[0];
  o.frames = pos[1];
  return o;
}

static double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(pos);
  const auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

static int run(const Options& o) {
  at::set_num_threads(o.threads);
  c10::InferenceMode inference;
  const bool cuda = o.device == "cuda" || (o.device == "auto" && torch::cuda::is_available());
  if (o.device == "cuda" && !torch::cuda::is_available()) throw std::runtime_error("--device cuda: no CUDA device");

  std::unique_ptr<Runner> runner;
  const std::string ext = fs::path(o.model).extension().string();
  if (ext == ".pt2") runner = std::make_unique<AOTIRunner>(o.model);
  else runner = std::make_unique<TorchScriptRunner>(o.model, cuda ? torch::Device("cuda:0") : torch::Device("cpu"));
  const Meta& m = runner->meta;
  const double fps = o.fps > 0 ? o.fps : m.fps;
  std::fprintf(stderr, "# model %s (%s, %s, family %s, conv head %s), frame %lldx%lld, hidden %lld, %.3g fps, |curvature| <= %g 1/m\n",
               o.model.c_str(), m.format.c_str(), runner->device.str().c_str(), m.family.c_str(), m.half ? "fp16" : "fp32",
               static_cast<long long>(m.width), static_cast<long long>(m.height), static_cast<long long>(m.hidden_size), fps,
               m.curvature_limit_per_m);

  FrameSource source(o.frames, m.height, m.width);
  FILE* out = o.out.empty() ? nullptr : std::fopen(o.out.c_str(), "w");
  if (!o.out.empty() && !out) throw std::runtime_error("cannot write " + o.out);

  // Warm-up on the first frame (allocator, kernel selection, TorchScript profiling), then start fresh.
  {
    at::Tensor hidden = runner->initial_state();
    const at::Tensor frame = source.frame(0).to(runner->device);
    for (int i = 0; i < o.warmup; ++i) hidden = runner->step(frame, hidden).hidden;
    (void)hidden.sum().item<float>();
  }

  const char* header = "frame,curvature_per_m,status,latency_ms\n";
  if (!o.quiet) std::fputs(header, stdout);
  if (out) std::fputs(header, out);
  std::vector<double> latency_ms;
  latency_ms.reserve(source.size());
  std::map<int64_t, size_t> status_counts;
  size_t overruns = 0;
  const auto period = std::chrono::duration<double>(1.0 / fps);
  at::Tensor hidden = runner->initial_state();
  const auto t0 = Clock::now();
  for (size_t i = 0; i < source.size(); ++i) {
    const at::Tensor host = source.frame(i);  // disk read is the camera's job: not timed
    if (o.pace) std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(i)));
    const auto start = Clock::now();
    StepOut s = runner->step(host.to(runner->device, /*non_blocking=*/false), hidden);
    const float curvature = s.curvature.to(torch::kCPU).item<float>();
    const auto stop = Clock::now();
    const int64_t status = s.status.to(torch::kCPU).item<int64_t>();
    hidden = s.hidden;
    const double ms = std::chrono::duration<double, std::milli>(stop - start).count();
    latency_ms.push_back(ms);
    status_counts[status] += 1;
    if (ms > 1000.0 / fps) ++overruns;
    char line[160];
    std::snprintf(line, sizeof line, "%zu,%.9g,%lld,%.4f\n", i, curvature, static_cast<long long>(status), ms);
    if (!o.quiet) std::fputs(line, stdout);
    if (out) std::fputs(line, out);
  }
  if (out) std::fclose(out);
  std::fprintf(stderr, "# %zu steps: latency p50 %.3f ms, p99 %.3f ms, max %.3f ms; %zu over the %.1f ms frame period\n",
               latency_ms.size(), percentile(latency_ms, 0.5), percentile(latency_ms, 0.99),
               *std::max_element(latency_ms.begin(), latency_ms.end()), overruns, 1000.0 / fps);
  for (const auto& [status, n] : status_counts)
    if (status != 0) std::fprintf(stderr, "# status %lld on %zu steps (see deploy/README.md)\n", static_cast<long long>(status), n);
  return 0;
}

int main(int argc, char** argv) {
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    if (*e.what()) std::cerr << "drive_runtime: " << e.what() << "\n";
    usage();
    return 2;
  }
  try {
    return run(o);
  } catch (const c10::Error& e) {
    std::cerr << "drive_runtime: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "drive_runtime: " << e.what() << "\n";
  }
  return 1;
}
