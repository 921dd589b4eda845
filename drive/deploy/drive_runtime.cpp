// drive_runtime: run an exported `drive` lane-keeping policy on camera frames, in C++.
//
//   drive_runtime MODEL FRAMES [--device auto|cpu|cuda] [--warmup N] [--threads N]
//                 [--fps F] [--no-pace] [--out commands.csv] [--quiet]
//   drive_runtime MODEL --video PATH [--ffmpeg PATH] [same options]
//
// MODEL   policy.ts  (TorchScript, `drive export --format torchscript`) or
//         policy.pt2 (AOTInductor package, `drive export --format aoti`).
// FRAMES  a folder of binary PPM images (P6, 8-bit RGB, read in file-name order) or one raw file
//         (or pipe, e.g. /dev/stdin) of consecutive uint8 RGB frames (height*width*3 bytes each,
//         HWC). Both carry the camera's native resolution; the model crops, resizes and
//         normalises inside.
// --video PATH  any video ffmpeg decodes, at the camera's native resolution (`frame_size` in the
//         model's metadata; a mismatch is refused, never rescaled here). Decoded by an ffmpeg
//         subprocess (`--ffmpeg PATH`, default `ffmpeg` on PATH) writing raw RGB to a pipe.
//
// The model is stateless: its hidden tensor [1, S] carries the recurrent state, the last command,
// the status flags of the last step and the time since the last usable frame; we hold it between
// steps. Each step prints `frame,curvature_per_m,status,latency_ms` (status bit flags: see
// README.md beside this file) and the run ends with latency p50/p99. Frames are paced at the camera rate
// (fps from the model's metadata) unless --no-pace. Latency covers host->device copy, the model
// and reading the command back to the host, i.e. what the vehicle waits for.
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#include <torch/cuda.h>
#include <ATen/Parallel.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>
#ifdef DRIVE_CUDA_GRAPH  // set by CMake when CUDA's runtime headers were found (CMakeLists.txt beside this file)
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
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

// The device an AOTInductor package was compiled for, read from its archive (the compiler's
// AOTI_DEVICE_KEY in data/aotinductor/<model>/*_metadata.json) without loading the package.
static std::string aoti_package_device(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  for (const std::string& name : reader.getAllRecords()) {
    if (name.find("aotinductor/") == std::string::npos || name.size() < 14 ||
        name.compare(name.size() - 14, 14, "_metadata.json") != 0)
      continue;
    auto [data, size] = reader.getRecord(name);
    const std::string json(static_cast<const char*>(data.get()), size);
    const auto key = json.find("\"AOTI_DEVICE_KEY\"");
    if (key == std::string::npos) continue;
    const auto open = json.find('"', json.find(':', key) + 1);
    const auto close = json.find('"', open + 1);
    if (open != std::string::npos && close != std::string::npos) return json.substr(open + 1, close - open - 1);
  }
  throw std::runtime_error(path + ": no AOTInductor metadata in the package: not a drive export?");
}

class AOTIRunner : public Runner {
 public:
  explicit AOTIRunner(const std::string& path) {
    // Refuse a CUDA package without a GPU, and create the CUDA context before the package's native
    // loader touches CUDA (Python's loader crashed on a CUDA package opened first thing in a process).
    if (aoti_package_device(path) == "cuda") {
      if (!torch::cuda::is_available())
        throw std::runtime_error(path + ": AOTInductor package compiled for CUDA, but there is no CUDA device here");
      (void)torch::zeros({1}, torch::Device("cuda:0")).sum().item<float>();
    }
    loader_ = std::make_unique<torch::inductor::AOTIModelPackageLoader>(path);
    auto m = loader_->get_metadata();
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
    auto out = loader_->run({frame, hidden});
    if (out.size() != 3) throw std::runtime_error("package returned " + std::to_string(out.size()) + " outputs, want 3");
    return {out[0], out[1], out[2]};
  }

 private:
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
};

// ---------------------------------------------------------------- CUDA graph
// The step captured once in a CUDA graph over static frame and hidden buffers (on CUDA, unless
// --no-cuda-graph): each step copies the frame and hidden in, replays, and returns copies of the
// outputs. The same kernels as plain stepping, without launching each of them from the host.
class GraphStep {
 public:
#ifdef DRIVE_CUDA_GRAPH
  GraphStep(Runner& runner, const at::Tensor& frame, const at::Tensor& hidden) : runner_(runner) {
    frame_ = frame.to(runner.device, /*non_blocking=*/false, /*copy=*/true);
    hidden_ = hidden.to(runner.device, /*non_blocking=*/false, /*copy=*/true);
    const auto index = runner.device.has_index() ? runner.device.index() : 0;
    auto side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, index);
    torch::cuda::synchronize(index);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      for (int i = 0; i < 4; ++i) (void)runner_.step(frame_, hidden_);  // settle the executor's plan
    }
    torch::cuda::synchronize(index);
    {
      c10::cuda::CUDAStreamGuard guard(side);  // capture needs a stream other than the legacy default
      graph_.capture_begin();
      try {
        out_ = runner_.step(frame_, hidden_);
      } catch (...) {
        try { graph_.capture_end(); } catch (...) {}
        throw;
      }
      graph_.capture_end();
    }
    torch::cuda::synchronize(index);
  }
  StepOut step(const at::Tensor& frame, const at::Tensor& hidden) {
    runner_.validate(frame, hidden);
    frame_.copy_(frame);
    hidden_.copy_(hidden);
    graph_.replay();
    return {out_.curvature.clone(), out_.hidden.clone(), out_.status.clone()};
  }
  static constexpr bool supported = true;

 private:
  at::cuda::CUDAGraph graph_;
#else
  GraphStep(Runner& runner, const at::Tensor&, const at::Tensor&) : runner_(runner) {
    throw std::runtime_error("this drive_runtime was built without CUDA's runtime headers (no CUDA-graph support)");
  }
  StepOut step(const at::Tensor& frame, const at::Tensor& hidden) { return runner_.step(frame, hidden); }
  static constexpr bool supported = false;

 private:
#endif
  Runner& runner_;
  at::Tensor frame_, hidden_;
  StepOut out_;
};

// ---------------------------------------------------------------- frame sources
struct FrameSize {
  int64_t height = 0, width = 0;
  bool operator==(const FrameSize&) const = default;
  int64_t bytes() const { return height * width * 3; }
  std::string str() const { return std::to_string(width) + "x" + std::to_string(height); }  // W x H, as ffmpeg says
};

// A binary PPM header (P6, maxval 255) from `in`, which is left at the first pixel byte.
static FrameSize read_ppm_header(std::istream& in, const std::string& name) {
  auto token = [&]() {
    std::string t;
    char c;
    while (in.get(c)) {
      if (c == '#') {
        std::string line;
        std::getline(in, line);
      } else if (std::isspace(static_cast<unsigned char>(c))) {
        if (!t.empty()) break;
      } else {
        t += c;
      }
    }
    return t;
  };
  auto number = [&]() {
    const std::string t = token();
    if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error(name + ": bad PPM header field '" + t + "'");
    return std::stoll(t);
  };
  if (token() != "P6") throw std::runtime_error(name + ": not a binary PPM (P6)");
  FrameSize size;
  size.width = number();
  size.height = number();
  if (number() != 255) throw std::runtime_error(name + ": only 8-bit PPM (maxval 255)");
  return size;
}

static std::string not_whole_frames(const std::string& name, uintmax_t bytes, const FrameSize& size) {
  return name + ": " + std::to_string(bytes) + " bytes is not a whole number of " + std::to_string(size.height) +
         "x" + std::to_string(size.width) + "x3 frames";
}

// How a child process ended, for error messages (status as pclose returns it).
static std::string exit_text(int status) {
  if (status == -1) return "could not be waited for";
  if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "wait status " + std::to_string(status);
}

class FrameSource {
 public:
  virtual ~FrameSource() = default;
  // The next frame as a uint8 tensor [1, H, W, 3] on the host; false after the last one.
  virtual bool next(at::Tensor& frame) = 0;
};

// A folder of binary PPM images, read in file-name order.
class PpmFolder final : public FrameSource {
 public:
  PpmFolder(const fs::path& dir, FrameSize size) : size_(size) {
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".ppm") files_.push_back(e.path());
    std::sort(files_.begin(), files_.end());
  }
  bool next(at::Tensor& frame) override {
    if (next_ == files_.size()) return false;
    const fs::path& path = files_[next_++];
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot open " + path.string());
    const FrameSize got = read_ppm_header(f, path.string());
    if (got != size_)
      throw std::runtime_error(path.string() + ": frame is " + got.str() + ", the model expects the camera's " +
                               size_.str());
    frame = torch::empty({1, size_.height, size_.width, 3}, torch::kUInt8);
    f.read(static_cast<char*>(frame.data_ptr()), static_cast<std::streamsize>(size_.bytes()));
    if (f.gcount() != static_cast<std::streamsize>(size_.bytes())) throw std::runtime_error(path.string() + ": truncated");
    return true;
  }

 private:
  FrameSize size_;
  std::vector<fs::path> files_;
  size_t next_ = 0;
};

// Consecutive uint8 RGB frames (H*W*3 bytes each, HWC) from a stream: a raw file, or the stdout
// of ffmpeg decoding a video. One reader for both, so a stream that ends mid-frame is caught the
// same way whichever produced it.
class RawFrames final : public FrameSource {
 public:
  // A regular file, or a pipe or FIFO a camera process writes into (e.g. /dev/stdin).
  static std::unique_ptr<RawFrames> file(const std::string& path, FrameSize size) {
    // a regular file's length is known: refuse a partial last frame before stepping on the first one
    if (fs::is_regular_file(path)) {
      const uintmax_t bytes = fs::file_size(path);
      if (bytes % static_cast<uintmax_t>(size.bytes()) != 0) throw std::runtime_error(not_whole_frames(path, bytes, size));
    }
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) throw std::runtime_error("cannot open " + path);
    return std::unique_ptr<RawFrames>(new RawFrames(f, false, path, size));
  }
  // `command` writes raw rgb24 frames of `size` to stdout; `name` is the video it decodes.
  static std::unique_ptr<RawFrames> pipe(const std::string& command, const std::string& name, FrameSize size) {
    FILE* p = popen(command.c_str(), "r");
    if (!p) throw std::runtime_error("cannot start " + command);
    return std::unique_ptr<RawFrames>(new RawFrames(p, true, name, size));
  }
  ~RawFrames() override {
    if (stream_) close();  // stopped early (an error): ffmpeg ends on the closed pipe
  }
  bool next(at::Tensor& frame) override {
    if (!stream_) return false;
    at::Tensor t = torch::empty({1, size_.height, size_.width, 3}, torch::kUInt8);
    const auto want = static_cast<size_t>(size_.bytes());
    const size_t got = std::fread(t.data_ptr(), 1, want, stream_);
    total_ += got;
    if (got == want) {
      frame = t;
      return true;
    }
    const bool read_error = std::ferror(stream_) != 0;
    const int status = close();
    if (read_error) throw std::runtime_error(name_ + ": read error");
    if (piped_ && status != 0)
      throw std::runtime_error(name_ + ": ffmpeg ended with " + exit_text(status) + " while decoding (its message is above)");
    if (got != 0) throw std::runtime_error(not_whole_frames(name_, total_, size_) + ": the stream ended mid-frame");
    return false;
  }

 private:
  RawFrames(FILE* stream, bool piped, std::string name, FrameSize size)
      : stream_(stream), piped_(piped), name_(std::move(name)), size_(size) {}
  // pclose waits for the child and returns how it ended
  int close() { return piped_ ? pclose(std::exchange(stream_, nullptr)) : std::fclose(std::exchange(stream_, nullptr)); }

  FILE* stream_;
  bool piped_;  // from popen (ffmpeg), else fopen
  std::string name_;
  FrameSize size_;
  uintmax_t total_ = 0;
};

// The --ffmpeg executable as the shell would find it (a path as given, a bare name on PATH), looked
// up first so that a missing ffmpeg is named as such, not reported as a failed decode.
static std::string find_ffmpeg(const std::string& name) {
  auto runnable = [](const fs::path& p) { return !fs::is_directory(p) && access(p.c_str(), X_OK) == 0; };
  if (name.find('/') != std::string::npos) {
    if (runnable(name)) return name;
    throw std::runtime_error("--ffmpeg " + name + ": no such executable");
  }
  std::istringstream dirs(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && runnable(fs::path(dir) / name)) return (fs::path(dir) / name).string();
  throw std::runtime_error("--ffmpeg " + name + ": not found on PATH; install ffmpeg or pass --ffmpeg /path/to/ffmpeg");
}

static std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// An ffmpeg command line decoding the first video stream of `video` to stdout in `format`.
// -nostdin: ffmpeg would otherwise read its interactive keys from our stdin.
static std::string ffmpeg_command(const std::string& ffmpeg, const std::string& video, const std::string& format) {
  return shell_quote(ffmpeg) + " -nostdin -v error -i " + shell_quote(video) + " -map 0:v:0 " + format;
}

// The size of the video's frames as ffmpeg decodes them: its first frame as a PPM (exact, and no
// parsing of ffmpeg's human-readable stream summary).
static FrameSize video_frame_size(const std::string& ffmpeg, const std::string& video) {
  FILE* p = popen(ffmpeg_command(ffmpeg, video, "-frames:v 1 -f image2pipe -vcodec ppm -").c_str(), "r");
  if (!p) throw std::runtime_error("cannot start " + ffmpeg);
  std::string ppm;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, p)) > 0;) ppm.append(buffer, n);
  const int status = pclose(p);
  if (status != 0 || ppm.empty())
    throw std::runtime_error(video + ": ffmpeg could not decode a video frame (" + exit_text(status) +
                             "; its message is above)");
  std::istringstream in(ppm);
  return read_ppm_header(in, video + " (first frame, decoded by " + ffmpeg + ")");
}

// ---------------------------------------------------------------- main loop
struct Options {
  std::string model, frames, video, ffmpeg = "ffmpeg", device = "auto", out;
  int warmup = 20, threads = 1;
  double fps = 0.0;
  bool pace = true, quiet = false, cuda_graph = true;
};

static void usage() {
  std::cerr << "usage: drive_runtime MODEL(.ts|.pt2) FRAMES(dir of .ppm | raw .rgb file or pipe)\n"
               "       drive_runtime MODEL(.ts|.pt2) --video PATH [--ffmpeg PATH]\n"
               "       [--device auto|cpu|cuda] [--warmup N] [--threads N] [--fps F] [--no-pace]\n"
               "       [--out commands.csv] [--quiet] [--no-cuda-graph]\n";
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
    else if (a == "--video") o.video = value();
    else if (a == "--ffmpeg") o.ffmpeg = value();
    else if (a == "--warmup") o.warmup = std::stoi(value());
    else if (a == "--threads") o.threads = std::stoi(value());
    else if (a == "--fps") o.fps = std::stod(value());
    else if (a == "--out") o.out = value();
    else if (a == "--no-pace") o.pace = false;
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--no-cuda-graph") o.cuda_graph = false;
    else if (a == "-h" || a == "--help") throw std::invalid_argument("");
    else if (!a.empty() && a[0] == '-') throw std::invalid_argument("unknown option " + a);
    else pos.push_back(a);
  }
  if (pos.size() != (o.video.empty() ? 2u : 1u))
    throw std::invalid_argument(o.video.empty() ? "need MODEL and FRAMES (or MODEL --video PATH)"
                                                : "--video replaces FRAMES: give MODEL and --video PATH");
  if (o.device != "auto" && o.device != "cpu" && o.device != "cuda")
    throw std::invalid_argument("--device must be auto, cpu or cuda");
  o.model = pos[0];
  if (o.video.empty()) o.frames = pos[1];
  return o;
}

// The frames the options name: --video through ffmpeg, else FRAMES (a .ppm folder or a raw file
// or pipe). A video must already be at the camera's size: rescaling here would hide a wrong camera.
static std::unique_ptr<FrameSource> open_frames(const Options& o, FrameSize size) {
  if (o.video.empty()) {
    if (!fs::exists(o.frames)) throw std::runtime_error(o.frames + ": no such file or folder");
    if (fs::is_directory(o.frames)) return std::make_unique<PpmFolder>(o.frames, size);
    return RawFrames::file(o.frames, size);
  }
  if (!fs::exists(o.video)) throw std::runtime_error("--video " + o.video + ": no such file");
  const std::string ffmpeg = find_ffmpeg(o.ffmpeg);
  const FrameSize got = video_frame_size(ffmpeg, o.video);
  if (got != size)
    throw std::runtime_error(o.video + ": video frames are " + got.str() + " (width x height), the model expects the camera's " +
                             size.str() + " (frame_size in its metadata); record or re-encode at that size");
  return RawFrames::pipe(ffmpeg_command(ffmpeg, o.video, "-f rawvideo -pix_fmt rgb24 -"), o.video, size);
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
  if (ext == ".pt2") {
    runner = std::make_unique<AOTIRunner>(o.model);  // compiled for one device: say so rather than move it
    if (o.device != "auto" && o.device != runner->meta.device)
      throw std::invalid_argument(o.model + " is compiled for " + runner->meta.device + ", not --device " + o.device +
                                  " (export it again with --device " + o.device + ")");
  } else runner = std::make_unique<TorchScriptRunner>(o.model, cuda ? torch::Device("cuda:0") : torch::Device("cpu"));
  const Meta& m = runner->meta;
  const double fps = o.fps > 0 ? o.fps : m.fps;
  std::fprintf(stderr, "# model %s (%s, %s, family %s, conv head %s), frame %lldx%lld, hidden %lld, %.3g fps, |curvature| <= %g 1/m\n",
               o.model.c_str(), m.format.c_str(), runner->device.str().c_str(), m.family.c_str(), m.half ? "fp16" : "fp32",
               static_cast<long long>(m.width), static_cast<long long>(m.height), static_cast<long long>(m.hidden_size), fps,
               m.curvature_limit_per_m);

  const std::unique_ptr<FrameSource> source = open_frames(o, {m.height, m.width});
  at::Tensor host;  // the current frame, on the host
  if (!source->next(host)) throw std::runtime_error((o.video.empty() ? o.frames : o.video) + ": no frames");
  std::unique_ptr<FILE, int (*)(FILE*)> out(o.out.empty() ? nullptr : std::fopen(o.out.c_str(), "w"), std::fclose);
  if (!o.out.empty() && !out) throw std::runtime_error("cannot write " + o.out);

  // Warm-up on the first frame (allocator, kernel selection, TorchScript profiling), then start fresh.
  {
    at::Tensor hidden = runner->initial_state();
    const at::Tensor frame = host.to(runner->device);
    for (int i = 0; i < o.warmup; ++i) hidden = runner->step(frame, hidden).hidden;
    (void)hidden.sum().item<float>();
  }

  // On CUDA the step runs as a captured CUDA graph unless --no-cuda-graph; a capture that fails is
  // reported and the run steps without one.
  std::unique_ptr<GraphStep> graph;
  if (runner->device.is_cuda() && o.cuda_graph) {
    try {
      graph = std::make_unique<GraphStep>(*runner, host, runner->initial_state());
      std::fprintf(stderr, "# stepping in a CUDA graph (--no-cuda-graph to turn it off)\n");
    } catch (const c10::Error& e) {
      std::fprintf(stderr, "# CUDA-graph capture failed (%s); stepping without a graph\n", e.what_without_backtrace());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "# CUDA-graph capture failed (%s); stepping without a graph\n", e.what());
    }
  }

  const char* header = "frame,curvature_per_m,status,latency_ms\n";
  if (!o.quiet) std::fputs(header, stdout);
  if (out) std::fputs(header, out.get());
  std::vector<double> latency_ms;
  std::map<int64_t, size_t> status_counts;
  size_t overruns = 0;
  const auto period = std::chrono::duration<double>(1.0 / fps);
  at::Tensor hidden = runner->initial_state();
  const auto t0 = Clock::now();
  size_t i = 0;
  do {  // reading the next frame (disk, ffmpeg) is the camera's job: not timed
    if (o.pace) std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(period * static_cast<double>(i)));
    const auto start = Clock::now();
    StepOut s = graph ? graph->step(host, hidden) : runner->step(host.to(runner->device, /*non_blocking=*/false), hidden);
    const float curvature = s.curvature.to(torch::kCPU).item<float>();
    const auto stop = Clock::now();
    const int64_t status = s.status.to(torch::kCPU).item<int64_t>();
    hidden = s.hidden;
    const double ms = std::chrono::duration<double, std::milli>(stop - start).count();
    latency_ms.push_back(ms);
    status_counts[status] += 1;
    if (ms > 1000.0 / fps) ++overruns;
    char line[160];
    std::snprintf(line, sizeof line, "%zu,%.9g,%lld,%.4f\n", i++, curvature, static_cast<long long>(status), ms);
    if (!o.quiet) std::fputs(line, stdout);
    if (out) std::fputs(line, out.get());
  } while (source->next(host));
  out.reset();
  std::fprintf(stderr, "# %zu steps: latency p50 %.3f ms, p99 %.3f ms, max %.3f ms; %zu over the %.1f ms frame period\n",
               latency_ms.size(), percentile(latency_ms, 0.5), percentile(latency_ms, 0.99),
               *std::max_element(latency_ms.begin(), latency_ms.end()), overruns, 1000.0 / fps);
  for (const auto& [status, n] : status_counts)
    if (status != 0) std::fprintf(stderr, "# status %lld on %zu steps (see the runtime's README.md)\n", static_cast<long long>(status), n);
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
