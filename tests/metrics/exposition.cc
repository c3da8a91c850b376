#include "tests/metrics/exposition.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

namespace conv1d::testing {
namespace {

double ParseNumber(const std::string& s) {
  if (s == "+Inf" || s == "Inf") return std::numeric_limits<double>::infinity();
  if (s == "-Inf") return -std::numeric_limits<double>::infinity();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  return std::strtod(s.c_str(), nullptr);
}

// Parses `{a="x",b="y"}` starting at text[pos] == '{'; returns the index
// after the closing brace.
size_t ParseLabels(const std::string& line, size_t pos,
                   std::map<std::string, std::string>* labels) {
  ++pos;  // '{'
  while (pos < line.size() && line[pos] != '}') {
    size_t eq = line.find('=', pos);
    std::string key = line.substr(pos, eq - pos);
    pos = eq + 2;  // past ="
    std::string value;
    while (pos < line.size() && line[pos] != '"') {
      if (line[pos] == '\\' && pos + 1 < line.size()) {
        char c = line[++pos];
        value.push_back(c == 'n' ? '\n' : c);
      } else {
        value.push_back(line[pos]);
      }
      ++pos;
    }
    ++pos;  // closing quote
    (*labels)[key] = value;
    if (pos < line.size() && line[pos] == ',') ++pos;
  }
  return pos + 1;
}

}  // namespace

Exposition Exposition::Parse(const std::string& text) {
  Exposition e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream c(line);
      std::string hash, kind, name, type;
      c >> hash >> kind >> name >> type;
      if (kind == "TYPE") e.types_[name] = type;
      continue;
    }
    Series s;
    size_t pos = line.find_first_of("{ ");
    s.name = line.substr(0, pos);
    if (pos != std::string::npos && line[pos] == '{') {
      pos = ParseLabels(line, pos, &s.labels);
    }
    std::istringstream v(line.substr(pos));
    std::string value;
    v >> value;
    s.value = ParseNumber(value);
    e.series_.push_back(std::move(s));
  }
  return e;
}

std::optional<double> Exposition::Value(
    const std::string& name,
    const std::map<std::string, std::string>& labels) const {
  for (const Series& s : series_) {
    if (s.name == name && s.labels == labels) return s.value;
  }
  return std::nullopt;
}

std::vector<std::pair<double, double>> Exposition::Buckets(
    const std::string& name, const std::map<std::string, std::string>& labels) const {
  std::vector<std::pair<double, double>> out;
  const std::string bucket = name + "_bucket";
  for (const Series& s : series_) {
    if (s.name != bucket) continue;
    auto rest = s.labels;
    auto it = rest.find("le");
    if (it == rest.end()) continue;
    const double bound = ParseNumber(it->second);
    rest.erase(it);
    if (rest == labels) out.emplace_back(bound, s.value);
  }
  return out;
}

std::optional<double> Exposition::Bucket(
    const std::string& name, const std::map<std::string, std::string>& labels,
    double le) const {
  for (const auto& [bound, value] : Buckets(name, labels)) {
    if (bound == le ||
        (std::isfinite(le) && std::fabs(bound - le) <= 1e-9 * std::fabs(le))) {
      return value;
    }
  }
  return std::nullopt;
}

std::vector<double> Exposition::Bounds(
    const std::string& name,
    const std::map<std::string, std::string>& labels) const {
  std::vector<double> out;
  for (const auto& [bound, value] : Buckets(name, labels)) out.push_back(bound);
  return out;
}

std::vector<std::string> Exposition::Names() const {
  std::set<std::string> names;
  for (const Series& s : series_) names.insert(s.name);
  return {names.begin(), names.end()};
}

int PromtoolCheckMetrics(const std::string& promtool, const std::string& text,
                         std::string* output) {
  char path[] = "/tmp/conv1d_metrics_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return -1;
  {
    std::ofstream f(path);
    f << text;
  }
  close(fd);
  const std::string cmd = "'" + promtool + "' check metrics < '" + path + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    unlink(path);
    return -1;
  }
  output->clear();
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  const int status = pclose(p);
  unlink(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace conv1d::testing
