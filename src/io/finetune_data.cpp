#include "io/finetune_data.hpp"

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace zt {

FinetuneFormat parse_finetune_format(const std::string& name) {
  if (name == "prompt_completion") return FinetuneFormat::prompt_completion;
  if (name == "chat") return FinetuneFormat::chat;
  ZT_USER_ERROR("unknown fine-tuning format '", name, "' (expected prompt_completion or chat)");
}

const std::vector<std::string>& chat_template_names() {
  static const std::vector<std::string> names = {"llama3", "plain"};
  return names;
}

FinetuneEncoder::FinetuneEncoder(const Tokenizer& tok, FinetuneOptions opts) : tok_(tok), opts_(std::move(opts)) {
  if (opts_.format != FinetuneFormat::chat) return;
  if (opts_.chat_template == "llama3") {
    auto need = [&](const char* name) {
      const auto id = tok_.token_id(name);
      if (!id) ZT_USER_ERROR("chat template llama3 needs the token ", name, ", which the tokenizer lacks");
      return *id;
    };
    start_header_ = need("<|start_header_id|>");
    end_header_ = need("<|end_header_id|>");
    eot_ = need("<|eot_id|>");
  } else if (opts_.chat_template != "plain") {
    ZT_USER_ERROR("unknown chat template '", opts_.chat_template, "' (expected llama3 or plain)");
  }
}

void FinetuneEncoder::token(uint32_t id, uint8_t counted, MaskedTokens& out) const {
  out.tokens.push_back(id);
  out.mask.push_back(counted);
}

void FinetuneEncoder::piece(const std::string& text, uint8_t counted, MaskedTokens& out) const {
  tok_.encode(text, out.tokens);
  out.mask.resize(out.tokens.size(), counted);
}

namespace {

const std::string& string_field(const nlohmann::json& obj, const char* key, const std::string& where) {
  const auto it = obj.find(key);
  if (it == obj.end()) ZT_USER_ERROR(where, "missing key \"", key, "\"");
  if (!it->is_string()) ZT_USER_ERROR(where, "\"", key, "\" must be a string, got ", it->type_name());
  return it->get_ref<const std::string&>();
}

void only_keys(const nlohmann::json& obj, std::initializer_list<const char*> keys, const std::string& where) {
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    bool known = false;
    for (const char* k : keys) known = known || it.key() == k;
    if (!known) ZT_USER_ERROR(where, "unknown key \"", it.key(), "\"");
  }
}

}  // namespace

void FinetuneEncoder::add_line(const std::string& line, const std::string& file, int64_t line_number,
                               MaskedTokens& out) const {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;
  const std::string where = file + ":" + std::to_string(line_number) + ": ";
  nlohmann::json ex;
  try {
    ex = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    ZT_USER_ERROR(where, "not valid JSON: ", e.what());
  }
  if (!ex.is_object()) ZT_USER_ERROR(where, "an example must be a JSON object, got ", ex.type_name());
  MaskedTokens one;
  if (opts_.bos) token(*opts_.bos, 0, one);
  bool ends_counted = false;
  if (opts_.format == FinetuneFormat::prompt_completion) {
    only_keys(ex, {"prompt", "completion"}, where);
    const std::string& prompt = string_field(ex, "prompt", where);
    const std::string& completion = string_field(ex, "completion", where);
    if (completion.empty()) ZT_USER_ERROR(where, "empty \"completion\": nothing to learn");
    piece(prompt, 0, one);
    piece(completion, 1, one);
    ends_counted = true;
  } else {
    only_keys(ex, {"messages"}, where);
    const auto it = ex.find("messages");
    if (it == ex.end()) ZT_USER_ERROR(where, "missing key \"messages\"");
    if (!it->is_array() || it->empty())
      ZT_USER_ERROR(where, "\"messages\" must be a non-empty array, got ", it->type_name());
    bool any_assistant = false;
    for (size_t m = 0; m < it->size(); ++m) {
      const nlohmann::json& msg = (*it)[m];
      const std::string at = where + "message " + std::to_string(m) + ": ";
      if (!msg.is_object()) ZT_USER_ERROR(at, "must be an object, got ", msg.type_name());
      only_keys(msg, {"role", "content"}, at);
      const std::string& role = string_field(msg, "role", at);
      const std::string& content = string_field(msg, "content", at);
      if (role != "system" && role != "user" && role != "assistant")
        ZT_USER_ERROR(at, "unknown role '", role, "' (expected system, user or assistant)");
      const uint8_t counted = role == "assistant" ? 1 : 0;
      any_assistant = any_assistant || counted;
      if (opts_.chat_template == "llama3") {
        token(start_header_, 0, one);
        piece(role, 0, one);
        token(end_header_, 0, one);
        piece("\n\n", 0, one);
        piece(content, counted, one);
        token(eot_, counted, one);
      } else {
        piece(role + ": ", 0, one);
        piece(content + "\n", counted, one);
      }
      ends_counted = counted == 1;
    }
    if (!any_assistant) ZT_USER_ERROR(where, "no assistant message: nothing to learn");
  }
  // Every example ends with EOS (once: llama3's <|eot_id|> may be the EOS).
  if (one.tokens.empty() || one.tokens.back() != opts_.eos) token(opts_.eos, ends_counted ? 1 : 0, one);
  out.example_begin.push_back(out.tokens.size());
  out.tokens.insert(out.tokens.end(), one.tokens.begin(), one.tokens.end());
  out.mask.insert(out.mask.end(), one.mask.begin(), one.mask.end());
}

void FinetuneEncoder::add_file(const std::string& path, MaskedTokens& out) const {
  std::ifstream in(path, std::ios::binary);
  if (!in) ZT_USER_ERROR("input file '", path, "' cannot be opened");
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) add_line(line, path, ++n, out);
  if (in.bad()) ZT_USER_ERROR("error while reading '", path, "'");
}

}  // namespace zt
