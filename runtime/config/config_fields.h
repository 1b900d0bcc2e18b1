// Config fields by reflection: set any field of a protobuf message from command-line
// text by its dotted path, and fill unset fields from their `(default_value)` option
// (runtime/config/etr_config.proto). Works on any message, so later config protos (and
// the tests, on protobuf's own messages) use the same code.
//
// Value syntax, by field type (the text after `path=`):
//   integers   decimal: 4, -3 (range-checked against the field's type)
//   reals      1e-3, 0.02, 6e-4 (finite only)
//   bool       true, false, 1, 0
//   string     verbatim, no quoting: data.train_file=my file.txt
//   enum       the value's name, case-insensitive, with the enum's common prefix
//              optional: log.log_level=debug == log.log_level=LOG_LEVEL_DEBUG
//   repeated   comma-separated elements, replacing the list; an empty value clears it
// Message fields are not values: name one of their fields (model.n_layer, not model).
// Maps and repeated messages cannot be set this way; they go in the config file.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace google::protobuf {
class Descriptor;
class Message;
}  // namespace google::protobuf

namespace etr {

// Sets the field at `path` ("model.n_layer") of `message` from `value`, creating the
// sub-messages on the way. Throws ConfigError for an unknown path (naming the closest
// valid paths), a path through a value, or a value that does not parse as the field's
// type; `message` is unchanged when it throws.
void set_field(google::protobuf::Message& message, std::string_view path, std::string_view value);

// Every unset field that has a `(default_value)` option takes that value, in every
// singular sub-message (created as needed when its type has defaults anywhere below).
// Repeated fields count as unset when empty. Fields the caller set are never touched.
void apply_field_defaults(google::protobuf::Message& message);

// "<path> = inf is out of range: expected a finite number such as 0.02 or 1e-3.": the one
// sentence for a non-finite real, whether it came from a config file or from set_field.
std::string nonfinite_sentence(std::string_view path, double value);

// Throws ConfigError (nonfinite_sentence) for the first set real (double or float) field
// anywhere in `message` that is inf or nan; `prefix` is the path of `message` itself.
void require_finite_reals(const google::protobuf::Message& message, const std::string& prefix = "");

// Dotted paths of every field reachable through singular sub-messages, sub-messages
// included, in declaration order: "model", "model.preset", "model.n_layer", ...
std::vector<std::string> field_paths(const google::protobuf::Descriptor& type);

// Up to `max` of `candidates` closest to `given`, in candidate order among equally close
// ones: by edit distance, also of the last dotted component alone ("n_layer" finds
// "model.n_layer"), or a sibling containing the given name ("data.file" finds
// "data.train_file"). Only plausible typos; empty when none is.
std::vector<std::string> closest_matches(std::string_view given,
                                         const std::vector<std::string>& candidates,
                                         size_t max = 3);

}  // namespace etr
