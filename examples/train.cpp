// A small training loop fed by stoker: what a user's main() looks like.
//
//   train [--data PATH] [--device cpu|cuda[:i]] [--epochs N] [--workers N] [--check]
//
// Without --data it writes a small, learnable HDF5 dataset first (images whose brightness encodes
// the label), the way a user's own preprocessing would, with the HDF5 C API. --check exits 1
// unless the last epoch's loss is well below the first's.
#include <hdf5.h>
#include <stoker/init.h>
#include <stoker/loader.h>
#include <stoker/torch.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
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

}  // namespace

int main(int argc, char** argv) {
  stoker::init(argc, argv);  // first: the loader's workers start from a clean image of this program
  std::string data, device = "cpu";
  int epochs = 5, workers = 2;
  bool check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--data") data = value();
    else if (a == "--device") device = value();
    else if (a == "--epochs") epochs = std::stoi(value());
    else if (a == "--workers") workers = std::stoi(value());
    else if (a == "--check") check = true;
    else {
      std::cerr << "usage: train [--data PATH] [--device cpu|cuda[:i]] [--epochs N] [--workers N] [--check]\n";
      return 2;
    }
  }
  try {
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
    stoker::Loader loader(opt);  // forks workers, sizes shared memory, or throws

    torch::manual_seed(0);
    const torch::Device dev = opt.device.kind == stoker::Device::Kind::cuda
                                  ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(opt.device.index))
                                  : torch::Device(torch::kCPU);
    torch::nn::Sequential model(torch::nn::Flatten(), torch::nn::Linear(3 * kSide * kSide, 64), torch::nn::ReLU(),
                                torch::nn::Linear(64, kClasses));
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
        auto logits = model->forward(t["image"].to(torch::kFloat).div_(255));
        auto loss = torch::nn::functional::cross_entropy(logits, t["label"]);
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
