#include "runtime/config/config_fields.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

#include "runtime/config/etr_config.pb.h"
#include "runtime/error.h"

namespace etr {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::EnumDescriptor;
using google::protobuf::EnumValueDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::Reflection;

// Deep enough for any config; stops field_paths() on a recursive message type.
constexpr int kMaxDepth = 8;

std::string join(const std::vector<std::string>& items, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += items[i];
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view last_component(std::string_view path) {
  size_t dot = path.rfind('.');
  return dot == std::string_view::npos ? path : path.substr(dot + 1);
}

// Optimal string alignment distance: Levenshtein plus swaps of adjacent characters.
size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

// "int32", "double", "enum etr.config.LogLevel": how messages name a field's type.
std::string type_name(const FieldDescriptor& field) {
  std::string name = field.type_name();
  if (field.cpp_type() == FieldDescriptor::CPPTYPE_ENUM)
    name += " " + field.enum_type()->full_name();
  if (field.is_repeated()) name = "list of " + name;
  return name;
}

// The longest prefix shared by all of an enum's value names, cut after its last '_'
// ("LOG_LEVEL_"); what a command-line value may leave out.
std::string enum_prefix(const EnumDescriptor& type) {
  if (type.value_count() < 2) return "";
  std::string prefix = type.value(0)->name();
  for (int i = 1; i < type.value_count(); ++i) {
    const std::string& name = type.value(i)->name();
    size_t n = 0;
    while (n < prefix.size() && n < name.size() && prefix[n] == name[n]) ++n;
    prefix.resize(n);
  }
  size_t underscore = prefix.rfind('_');
  return underscore == std::string::npos ? "" : prefix.substr(0, underscore + 1);
}

// One parsed element; which member holds it depends on the field's C++ type.
struct Scalar {
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  bool b = false;
  std::string s;
  const EnumValueDescriptor* e = nullptr;
};

[[noreturn]] void bad_value(std::string_view path, std::string_view text,
                            const FieldDescriptor& field, const std::string& expected) {
  throw ConfigError("bad value \"" + std::string(text) + "\" for " + std::string(path) + " (" +
                    type_name(field) + "): " + expected);
}

int64_t parse_signed(std::string_view path, std::string_view text, const FieldDescriptor& field,
                     int64_t lo, int64_t hi) {
  std::string_view s = trim(text);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && (v < lo || v > hi)))
    bad_value(path, text, field,
              "out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    bad_value(path, text, field, "expected an integer");
  return v;
}

uint64_t parse_unsigned(std::string_view path, std::string_view text, const FieldDescriptor& field,
                        uint64_t hi) {
  std::string_view s = trim(text);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && v > hi))
    bad_value(path, text, field, "out of range [0, " + std::to_string(hi) + "]");
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    bad_value(path, text, field, "expected a non-negative integer");
  return v;
}

double parse_real(std::string_view path, std::string_view text, const FieldDescriptor& field,
                  double max_magnitude) {
  std::string_view s = trim(text);
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  // inf and nan parse as numbers; they get the sentence validate() gives a config file's.
  if (ec == std::errc() && end == s.data() + s.size() && !std::isfinite(v))
    throw ConfigError(nonfinite_sentence(path, v));
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && std::fabs(v) > max_magnitude))
    bad_value(path, text, field, "out of range");
  if (ec != std::errc() || end != s.data() + s.size() || s.empty())
    bad_value(path, text, field, "expected a finite number such as 0.02 or 1e-3");
  return v;
}

const EnumValueDescriptor* parse_enum(std::string_view path, std::string_view text,
                                      const FieldDescriptor& field) {
  const EnumDescriptor& type = *field.enum_type();
  std::string s(trim(text));
  if (const EnumValueDescriptor* exact = type.FindValueByName(s)) return exact;
  std::string prefix = enum_prefix(type);
  std::string wanted = lower(s);
  std::vector<std::string> short_names;
  for (int i = 0; i < type.value_count(); ++i) {
    const std::string& name = type.value(i)->name();
    std::string short_name = lower(std::string_view(name).substr(prefix.size()));
    if (wanted == lower(name) || wanted == short_name) return type.value(i);
    short_names.push_back(short_name);
  }
  std::string expected = "expected one of " + join(short_names, ", ");
  if (!prefix.empty()) expected += " (any case; the prefix " + prefix + " may be written too)";
  bad_value(path, text, field, expected);
}

Scalar parse_scalar(std::string_view path, std::string_view text, const FieldDescriptor& field) {
  Scalar v;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      if (field.options().GetExtension(config::accepts_auto) && trim(text) == "auto") {
        v.i = 0;
        break;
      }
      v.i = parse_signed(path, text, field, std::numeric_limits<int32_t>::min(),
                         std::numeric_limits<int32_t>::max());
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      v.i = parse_signed(path, text, field, std::numeric_limits<int64_t>::min(),
                         std::numeric_limits<int64_t>::max());
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      v.u = parse_unsigned(path, text, field, std::numeric_limits<uint32_t>::max());
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      v.u = parse_unsigned(path, text, field, std::numeric_limits<uint64_t>::max());
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      v.d = parse_real(path, text, field, std::numeric_limits<double>::max());
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      v.d = parse_real(path, text, field, std::numeric_limits<float>::max());
      break;
    case FieldDescriptor::CPPTYPE_BOOL: {
      std::string s = lower(trim(text));
      if (s == "true" || s == "1")
        v.b = true;
      else if (s == "false" || s == "0")
        v.b = false;
      else
        bad_value(path, text, field, "expected true or false");
      break;
    }
    case FieldDescriptor::CPPTYPE_STRING:
      v.s = std::string(text);
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      v.e = parse_enum(path, text, field);
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      throw Error("internal: parse_scalar called on message field " + field.full_name());
  }
  return v;
}

void store(Message& message, const FieldDescriptor& field, const Scalar& v) {
  const Reflection& r = *message.GetReflection();
  bool add = field.is_repeated();
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      add ? r.AddInt32(&message, &field, static_cast<int32_t>(v.i))
          : r.SetInt32(&message, &field, static_cast<int32_t>(v.i));
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      add ? r.AddInt64(&message, &field, v.i) : r.SetInt64(&message, &field, v.i);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      add ? r.AddUInt32(&message, &field, static_cast<uint32_t>(v.u))
          : r.SetUInt32(&message, &field, static_cast<uint32_t>(v.u));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      add ? r.AddUInt64(&message, &field, v.u) : r.SetUInt64(&message, &field, v.u);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      add ? r.AddDouble(&message, &field, v.d) : r.SetDouble(&message, &field, v.d);
      break;
    case FieldDescriptor::CPPTYPE_FLOAT:
      add ? r.AddFloat(&message, &field, static_cast<float>(v.d))
          : r.SetFloat(&message, &field, static_cast<float>(v.d));
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      add ? r.AddBool(&message, &field, v.b) : r.SetBool(&message, &field, v.b);
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      add ? r.AddString(&message, &field, v.s) : r.SetString(&message, &field, v.s);
      break;
    case FieldDescriptor::CPPTYPE_ENUM:
      add ? r.AddEnum(&message, &field, v.e) : r.SetEnum(&message, &field, v.e);
      break;
    case FieldDescriptor::CPPTYPE_MESSAGE:
      throw Error("internal: store called on message field " + field.full_name());
  }
}

// The elements of `text` for `field`: one for a singular field, the comma-separated
// ones (none for "") for a repeated field.
std::vector<Scalar> parse_all(const FieldDescriptor& field, std::string_view text,
                              std::string_view path) {
  std::vector<Scalar> values;
  if (!field.is_repeated()) {
    values.push_back(parse_scalar(path, text, field));
  } else if (!trim(text).empty()) {
    size_t start = 0;
    while (true) {
      size_t comma = text.find(',', start);
      values.push_back(parse_scalar(path, text.substr(start, comma - start), field));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  return values;
}

// Replaces the field's value (or list) with `values`.
void write(Message& message, const FieldDescriptor& field, const std::vector<Scalar>& values) {
  if (field.is_repeated()) message.GetReflection()->ClearField(&message, &field);
  for (const Scalar& v : values) store(message, field, v);
}

[[noreturn]] void unknown_field(const Descriptor& root, std::string_view path,
                                std::string_view parent, const Descriptor& parent_type) {
  std::string msg = "unknown config field \"" + std::string(path) + "\"";
  std::vector<std::string> close = closest_matches(path, field_paths(root));
  if (!close.empty()) msg += "; did you mean " + join(close, " or ") + "?";
  std::vector<std::string> names;
  for (int i = 0; i < parent_type.field_count(); ++i) names.push_back(parent_type.field(i)->name());
  msg += parent.empty() ? " (top-level fields: " : " (fields of " + std::string(parent) + ": ";
  msg += join(names, ", ") + ")";
  throw ConfigError(msg);
}

// The fields along `path`, checked on the descriptors alone so that nothing is created
// for a path that turns out to be bad.
std::vector<const FieldDescriptor*> resolve_path(const Descriptor& root, std::string_view path) {
  if (path.empty())
    throw ConfigError("a config override names no field; write path=value, e.g. model.n_layer=4");
  std::vector<const FieldDescriptor*> chain;
  const Descriptor* type = &root;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string_view part = path.substr(start, dot - start);
    std::string_view parent = start == 0 ? std::string_view() : path.substr(0, start - 1);
    const FieldDescriptor* field = type->FindFieldByName(std::string(part));
    if (field == nullptr) unknown_field(root, path, parent, *type);
    chain.push_back(field);
    if (dot == std::string_view::npos) return chain;
    std::string_view here = path.substr(0, dot);
    if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE)
      throw ConfigError(std::string(here) + " is a value, not a group of settings, so \"" +
                        std::string(path) + "\" names nothing; set " + std::string(here) +
                        " itself");
    if (field->is_repeated())
      throw ConfigError(std::string(here) +
                        " is a list of messages, which cannot be set from the command line; "
                        "set it in the config file");
    type = field->message_type();
    start = dot + 1;
  }
}

void collect_paths(const Descriptor& type, const std::string& prefix, int depth,
                   std::vector<std::string>& out) {
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& field = *type.field(i);
    std::string path = prefix.empty() ? field.name() : prefix + "." + field.name();
    out.push_back(path);
    if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !field.is_repeated() &&
        depth < kMaxDepth)
      collect_paths(*field.message_type(), path, depth + 1, out);
  }
}

// Whether `type` or any singular sub-message type below it has a field with a default.
bool has_defaults(const Descriptor& type, std::set<const Descriptor*>& visiting) {
  if (!visiting.insert(&type).second) return false;
  bool any = false;
  for (int i = 0; i < type.field_count() && !any; ++i) {
    const FieldDescriptor& field = *type.field(i);
    if (field.options().HasExtension(config::default_value))
      any = true;
    else if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE && !field.is_repeated())
      any = has_defaults(*field.message_type(), visiting);
  }
  visiting.erase(&type);
  return any;
}

// `filling`: the types of the messages being filled further up, so that a recursive
// type does not create sub-messages without end.
void fill_defaults(Message& message, std::set<const Descriptor*>& filling) {
  const Descriptor& type = *message.GetDescriptor();
  const Reflection& r = *message.GetReflection();
  filling.insert(&type);
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& field = *type.field(i);
    if (field.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
      if (field.is_repeated()) continue;
      std::set<const Descriptor*> visiting;
      bool create =
          !filling.contains(field.message_type()) && has_defaults(*field.message_type(), visiting);
      if (r.HasField(message, &field) || create)
        fill_defaults(*r.MutableMessage(&message, &field), filling);
      continue;
    }
    if (!field.options().HasExtension(config::default_value)) continue;
    if (!field.is_repeated() && !field.has_presence())
      throw Error("internal: " + field.full_name() +
                  " has a default_value but no presence; declare it `optional`");
    bool unset =
        field.is_repeated() ? r.FieldSize(message, &field) == 0 : !r.HasField(message, &field);
    if (unset)
      write(
          message, field,
          parse_all(field, field.options().GetExtension(config::default_value), field.full_name()));
  }
  filling.erase(&type);
}

}  // namespace

void set_field(Message& message, std::string_view path, std::string_view value) {
  std::vector<const FieldDescriptor*> chain = resolve_path(*message.GetDescriptor(), path);
  const FieldDescriptor& leaf = *chain.back();
  if (leaf.is_map())
    throw ConfigError(std::string(path) +
                      " is a map, which cannot be set from the command line; set it in the "
                      "config file");
  if (leaf.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
    if (leaf.is_repeated())
      throw ConfigError(std::string(path) +
                        " is a list of messages, which cannot be set from the command line; "
                        "set it in the config file");
    const Descriptor& type = *leaf.message_type();
    std::string example = type.field_count() > 0
                              ? std::string(path) + "." + type.field(0)->name() + "=..."
                              : std::string(path) + ".<field>=...";
    throw ConfigError(std::string(path) +
                      " is a group of settings, not a value; set one of its fields, e.g. " +
                      example);
  }
  // Parsed before anything is written, so that a bad value changes nothing.
  std::vector<Scalar> values = parse_all(leaf, value, path);
  Message* target = &message;
  for (size_t i = 0; i + 1 < chain.size(); ++i)
    target = target->GetReflection()->MutableMessage(target, chain[i]);
  write(*target, leaf, values);
}

std::string nonfinite_sentence(std::string_view path, double value) {
  const std::string v = std::isnan(value) ? "nan" : value > 0 ? "inf" : "-inf";
  return std::string(path) + " = " + v +
         " is out of range: expected a finite number such as 0.02 or 1e-3.";
}

void require_finite_reals(const Message& message, const std::string& prefix) {
  const Descriptor& type = *message.GetDescriptor();
  const Reflection& r = *message.GetReflection();
  for (int i = 0; i < type.field_count(); ++i) {
    const FieldDescriptor& f = *type.field(i);
    const std::string path = prefix.empty() ? f.name() : prefix + "." + f.name();
    const int n = f.is_repeated() ? r.FieldSize(message, &f) : r.HasField(message, &f) ? 1 : 0;
    for (int k = 0; k < n; ++k) {
      double v = 0;
      if (f.cpp_type() == FieldDescriptor::CPPTYPE_MESSAGE) {
        require_finite_reals(
            f.is_repeated() ? r.GetRepeatedMessage(message, &f, k) : r.GetMessage(message, &f),
            path);
        continue;
      }
      if (f.cpp_type() == FieldDescriptor::CPPTYPE_DOUBLE)
        v = f.is_repeated() ? r.GetRepeatedDouble(message, &f, k) : r.GetDouble(message, &f);
      else if (f.cpp_type() == FieldDescriptor::CPPTYPE_FLOAT)
        v = f.is_repeated() ? r.GetRepeatedFloat(message, &f, k) : r.GetFloat(message, &f);
      if (!std::isfinite(v)) throw ConfigError(nonfinite_sentence(path, v));
    }
  }
}

void apply_field_defaults(Message& message) {
  std::set<const Descriptor*> filling;
  fill_defaults(message, filling);
}

std::vector<std::string> field_paths(const Descriptor& type) {
  std::vector<std::string> out;
  collect_paths(type, "", 0, out);
  return out;
}

std::vector<std::string> closest_matches(std::string_view given,
                                         const std::vector<std::string>& candidates, size_t max) {
  std::string_view given_last = last_component(given);
  std::string_view given_parent = given.substr(0, given.size() - given_last.size());
  // Plausible: a typo of up to a third of the name (at least one edit); the last
  // component alone, plus one (the right field under the wrong or a missing parent); a
  // sibling whose name contains the given one ("data.file" -> "data.train_file").
  size_t limit = 1 + std::max<size_t>(1, given_last.size() / 3);
  std::vector<std::pair<size_t, size_t>> scored;  // (score, index in candidates)
  for (size_t i = 0; i < candidates.size(); ++i) {
    std::string_view last = last_component(candidates[i]);
    std::string_view parent =
        std::string_view(candidates[i]).substr(0, candidates[i].size() - last.size());
    // An edit distance is at least the difference in length: a pair that cannot come
    // within the limit skips the quadratic computation (a mistyped path thousands of
    // bytes long took 0.1 s per suggestion under the fuzzer, tests/fuzz/fuzz_config.cc).
    auto within = [limit](std::string_view a, std::string_view b, size_t extra) {
      const size_t gap = a.size() > b.size() ? a.size() - b.size() : b.size() - a.size();
      return gap + extra > limit ? limit + 1 : edit_distance(a, b) + extra;
    };
    size_t score = std::min(within(given, candidates[i], 0), within(given_last, last, 1));
    if (given_last.size() >= 3 && parent == given_parent &&
        last.find(given_last) != std::string_view::npos)
      score = std::min(score, limit);
    if (score <= limit) scored.emplace_back(score, i);
  }
  std::stable_sort(scored.begin(), scored.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  // The best score only: ties are equally likely, anything worse is noise.
  std::vector<std::string> out;
  for (const auto& [score, index] : scored) {
    if (out.size() == max || score > scored.front().first) break;
    out.push_back(candidates[index]);
  }
  return out;
}

}  // namespace etr
