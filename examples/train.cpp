// A small training loop fed by stoker: what a user's main() looks like.
//
//   train [--data PATH] [--pipeline SPEC] [--classes N] [--device cpu|cuda[:i]] [--epochs N]
//         [--workers N] [--check]
//
// Without --data it writes a small, learnable HDF5 dataset first (images whose brightness encodes
// the label), the way a user's own preprocessing would, with the HDF5 C API. With --data, the
// dataset must deliver the two fields the model takes, checked before training starts:
// `image`, of a fixed shape (u8 or f32; encoded images decoded by --pipeline, e.g.
// "image=decode,resize(32,32),to_chw"), and `label`, one integer per sample in 0 .. classes-1,
// where classes is --classes, else the number of class names the dataset stores (stoker-pack's
// "labels" metadata), else 10. --check exits 1 unless the last epoch's loss is well below the
// first's.
#include <hdf5.h>
#include <stoker/init.h>
#include <stoker/loader.h>
#include <stoker/torch.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <stdexcept>
#include <string>

namespace {

constexpr int kSamples = 4096, kClasses = 10, kSide = 8;

void write_demo_dataset(const std::string& path) {
  std::mt19937 rng(7);
  std::vector<std::uint8_t> images(std::size_t{kSamples} * 3 * kSide * kSide);
  std::vector<std::int64_t> labels(kSamples);
  for (int i = 0; i < kSamples; ++i) {
    labels[i] = static_cast<std::int64_t>(rng() % kClasses);
    for (int k = 0; k < 3 * kSide * kSide; ++k) {
      int v = static_cast<int>(labels[i]) * 24 + static_cast<int>(rng() % 41) - 20;
      images[static_cast<std::size_t>(i) * 3 * kSide * kSide + k] = static_cast<std::uint8_t>(std::clamp(v, 0, 255));
    }
  }
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t idims[4] = {kSamples, 3, kSide, kSide}, ldims[1] = {kSamples};
  hid_t is = H5Screate_simple(4, idims, nullptr), ls = H5Screate_simple(1, ldims, nullptr);
  hid_t id = H5Dcreate2(file, "image", H5T_STD_U8LE, is, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t ld = H5Dcreate2(file, "label", H5T_STD_I64LE, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0 || id < 0 || ld < 0 ||
      H5Dwrite(id, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, images.data()) < 0 ||
      H5Dwrite(ld, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, labels.data()) < 0) {
    throw std::runtime_error("cannot write " + path);
  }
  H5Dclose(id);
  H5Dclose(ld);
  H5Sclose(is);
  H5Sclose(ls);
  H5Fclose(file);
}

// The model's input size: the elements of one image. Throws, saying what the example expects,
// when the dataset's fields do not fit the model.
std::int64_t check_fields_fit(const stoker::Loader& loader) {
  const stoker::Schema& schema = loader.schema();
  const std::string what =
      "this example trains on 'image' (u8 or f32, one shape for every sample, e.g. [3, 32, 32]) and 'label' "
      "(one integer per sample); " +
      loader.options().source + " delivers: " + schema.describe_fields();
  const stoker::Field* image = schema.find("image");
  const stoker::Field* label = schema.find("label");
  if (!image || !label) throw std::runtime_error(what);
  if (image->kind == stoker::FieldKind::bytes) {
    throw std::runtime_error(what +
                             "; 'image' holds encoded bytes: decode them in the workers with --pipeline "
                             "'image=decode,resize(32,32),to_chw'");
  }
  if (image->dtype != stoker::DType::u8 && image->dtype != stoker::DType::f32) throw std::runtime_error(what);
  const bool integer = label->dtype == stoker::DType::i64 || label->dtype == stoker::DType::i32 ||
                       label->dtype == stoker::DType::i16 || label->dtype == stoker::DType::i8 ||
                       label->dtype == stoker::DType::u8 || label->dtype == stoker::DType::u16;
  const bool scalar = label->shape.empty() || (label->shape.size() == 1 && label->shape[0] == 1);
  if (label->kind != stoker::FieldKind::fixed || !integer || !scalar) throw std::runtime_error(what);
  return static_cast<std::int64_t>(image->elements_per_sample());
}

// --classes, else the number of class names the dataset stores for 'label', else kClasses.
std::int64_t class_count(const stoker::Loader& loader, std::int64_t given) {
  if (given > 0) return given;
  const auto stored = loader.metadata().find("labels");
  if (stored == loader.metadata().end()) return kClasses;
  const nlohmann::json names = nlohmann::json::parse(stored->second, nullptr, false);
  if (names.is_object() && names.contains("label") && names["label"].is_array() && !names["label"].empty()) {
    return static_cast<std::int64_t>(names["label"].size());
  }
  return kClasses;
}

// Throws, naming the value and what to do, when a batch's labels are not class indices.
void check_labels(const torch::Tensor& labels, std::int64_t classes, std::int64_t batch) {
  const auto [lo, hi] = torch::aminmax(labels);
  const std::int64_t low = lo.item<std::int64_t>(), high = hi.item<std::int64_t>();
  if (low >= 0 && high < classes) return;
  throw std::runtime_error("batch " + std::to_string(batch) + " holds label " + std::to_string(low < 0 ? low : high) +
                           ", not a class of 0 .. " + std::to_string(classes - 1) +
                           ": give the number of classes with --classes N");
}

// `text`, the value of `flag`, as a whole number of at least `least` that an int holds.
std::int64_t whole(const std::string& flag, const std::string& text, std::int64_t least) {
  std::size_t used = 0;
  std::int64_t n = 0;
  try {
    n = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || n < least || n > std::numeric_limits<int>::max()) {
    throw std::invalid_argument(flag + " needs a whole number of at least " + std::to_string(least) + ", not '" + text +
                                "'");
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  stoker::init(argc, argv);  // first: the loader's workers start from a clean image of this program
  try {
    std::string data, pipeline, device = "cpu";
    int epochs = 5, workers = 2;
    std::int64_t classes_given = 0;
    bool check = false;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (a == "--data") data = value();
      else if (a == "--pipeline") pipeline = value();
      else if (a == "--classes") classes_given = whole(a, value(), 1);
      else if (a == "--device") device = value();
      else if (a == "--epochs") epochs = static_cast<int>(whole(a, value(), 1));
      else if (a == "--workers") workers = static_cast<int>(whole(a, value(), 0));
      else if (a == "--check") check = true;
      else {
        std::cerr << "usage: train [--data PATH] [--pipeline SPEC] [--classes N] [--device cpu|cuda[:i]] [--epochs N] "
                     "[--workers N] [--check]\n";
        return 2;
      }
    }
    std::string scratch;
    struct RemoveScratch {
      const std::string& path;
      ~RemoveScratch() {
        if (!path.empty()) std::filesystem::remove(path);
      }
    } remove_scratch{scratch};
    if (data.empty()) {
      scratch =
          (std::filesystem::temp_directory_path() / ("stoker-train-" + std::to_string(::getpid()) + ".h5")).string();
      write_demo_dataset(scratch);
      data = scratch;
    }
    stoker::Options opt;
    opt.source = data;
    opt.batch_size = 64;
    opt.num_workers = static_cast<std::size_t>(workers);
    opt.shuffle = true;
    opt.seed = 42;
    opt.device = stoker::Device::parse(device);
    opt.pipeline = pipeline;
    stoker::Loader loader(opt);  // forks workers, sizes shared memory, or throws
    const std::int64_t inputs = check_fields_fit(loader);
    const std::int64_t classes = class_count(loader, classes_given);

    torch::manual_seed(0);
    const torch::Device dev = opt.device.kind == stoker::Device::Kind::cuda
                                  ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(opt.device.index))
                                  : torch::Device(torch::kCPU);
    torch::nn::Sequential model(torch::nn::Flatten(), torch::nn::Linear(inputs, 64), torch::nn::ReLU(),
                                torch::nn::Linear(64, classes));
    model->to(dev);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));

    double first = 0, last = 0;
    for (int epoch = 0; epoch < epochs; ++epoch) {
      const auto t0 = std::chrono::steady_clock::now();
      const stoker::Stats before = loader.stats();
      torch::Tensor total = torch::zeros({}, torch::TensorOptions().device(dev));
      std::int64_t batches = 0;
      for (stoker::Batch& batch : loader.epoch(static_cast<std::uint64_t>(epoch))) {
        auto t = stoker::to_tensors(std::move(batch));  // zero-copy, on `dev`, ready on torch's stream
        const torch::Tensor labels = t["label"].reshape({-1}).to(torch::kLong);
        if (epoch == 0) check_labels(labels, classes, batches);  // a sync per batch, in the first epoch only
        torch::Tensor image = t["image"].to(torch::kFloat);      // u8: a copy of its own to scale; f32: itself
        if (t["image"].scalar_type() == torch::kByte) image.div_(255);
        auto logits = model->forward(image);
        auto loss = torch::nn::functional::cross_entropy(logits, labels);
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
        total += loss.detach();
        ++batches;
      }
      const double mean = total.item<double>() / static_cast<double>(batches);  // one sync per epoch
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const stoker::Stats s = loader.stats();
      std::cout << "epoch " << epoch << ": loss " << mean << ", " << batches << " batches in " << seconds
                << " s, waited for data " << (s.wait_seconds - before.wait_seconds) << " s";
      if (s.gpu_span_seconds > 0) {
        std::cout << ", GPU idle " << 100.0 * s.gpu_wait_seconds / s.gpu_span_seconds << "% between steps";
      }
      std::cout << "\n";
      if (epoch == 0) first = mean;
      last = mean;
    }
    std::cout << "loader: " << loader.stats() << "\n";
    if (check) {
      if (!(last < 0.8 * first)) {
        std::cerr << "train: the loss did not decrease enough (" << first << " -> " << last << ")\n";
        return 1;
      }
      std::cout << "loss decreased from " << first << " to " << last << "\n";
    }
  } catch (const std::exception& e) {
    std::cerr << "train: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
