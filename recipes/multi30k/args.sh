# Sourced by the Multi30k job scripts with their arguments: activates .venv unless another environment is active,
# then sets source_lang, target_lang and data_dir from SOURCE_LANG TARGET_LANG [DATA_DIR], refusing any direction
# but en-de and de-en (the job's own usage line names the script).
if [ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ]; then
    . .venv/bin/activate
fi

usage="usage: bash recipes/multi30k/$(basename "$0") SOURCE_LANG TARGET_LANG [DATA_DIR] [OUTPUT_DIR]  (en de, or de en)"
source_lang=${1:?$usage}
target_lang=${2:?$usage}
case "$source_lang-$target_lang" in
    en-de | de-en) ;;
    *) echo "$usage; got $source_lang $target_lang" >&2; exit 2 ;;
esac
data_dir=${3:-${HF_TRANSFORMER_DATA:-data}}
